/*
 * mask.h: which keys a query row sees, for the kernels that take any mask.
 *
 * Row i (of seq_q) and key j (of seq_kv) meet on the diagonal j = i + diag,
 * diag = seq_kv - seq_q (bottom-right alignment). Key j is visible when
 *     i + diag - WINDOW_LEFT <= j <= i + diag + WINDOW_RIGHT,
 * each bound dropped where its window is -1 (unlimited): FlashAttention's
 * sliding-window semantics. CAUSAL is WINDOW_RIGHT = 0 with WINDOW_LEFT = -1.
 * The host passes both windows with -D; both default to the CAUSAL flag's.
 */
#ifndef FLASHCL_MASK_H
#define FLASHCL_MASK_H

#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef WINDOW_LEFT
#define WINDOW_LEFT (-1)
#endif
#ifndef WINDOW_RIGHT
#define WINDOW_RIGHT (CAUSAL ? 0 : -1)
#endif
/* Whether any key can be hidden (blocks are then trimmed and elements tested). */
#define MASKED (WINDOW_LEFT >= 0 || WINDOW_RIGHT >= 0)

static inline bool mask_visible(int row, int key, int diag)
{
    bool visible = true;
    if (WINDOW_RIGHT >= 0)
        visible = visible && key <= row + diag + WINDOW_RIGHT;
    if (WINDOW_LEFT >= 0)
        visible = visible && key >= row + diag - WINDOW_LEFT;
    return visible;
}

/* Rows row0 .. row0 + rows - 1 against keys key0 .. key0 + keys - 1 (the backward kernels' tiles): whether no
 * pair is visible (the tile is skipped), and whether some pair is hidden (its elements are tested). A hidden
 * tile is an edge too, so a kernel that computes a tile it could skip (emulated) masks all of it. */
static inline bool mask_tile_hidden(int row0, int rows, int key0, int keys, int diag)
{
    bool hidden = false;
    if (WINDOW_RIGHT >= 0)
        hidden = hidden || key0 > row0 + rows - 1 + diag + WINDOW_RIGHT;
    if (WINDOW_LEFT >= 0)
        hidden = hidden || key0 + keys - 1 < row0 + diag - WINDOW_LEFT;
    return hidden;
}

static inline bool mask_tile_edge(int row0, int rows, int key0, int keys, int diag)
{
    bool edge = false;
    if (WINDOW_RIGHT >= 0)
        edge = edge || key0 + keys - 1 > row0 + diag + WINDOW_RIGHT;
    if (WINDOW_LEFT >= 0)
        edge = edge || key0 < row0 + rows - 1 + diag - WINDOW_LEFT;
    return edge;
}

/* The keys rows row0 .. row0 + rows - 1 see, together: [begin, end). Blocks
 * outside are skipped, not computed and masked. Empty when begin >= end. */
static inline int mask_key_begin(int row0, int seq_q, int seq_kv)
{
    return WINDOW_LEFT >= 0 ? max(0, row0 + (seq_kv - seq_q) - WINDOW_LEFT) : 0;
}

static inline int mask_key_end(int row0, int rows, int seq_q, int seq_kv)
{
    return WINDOW_RIGHT >= 0 ? min(seq_kv, row0 + rows - 1 + (seq_kv - seq_q) + WINDOW_RIGHT + 1) : seq_kv;
}

/* The query rows that see keys key0 .. key0 + keys - 1, together: [begin, end). */
static inline int mask_row_begin(int key0, int seq_q, int seq_kv)
{
    return WINDOW_RIGHT >= 0 ? max(0, key0 - (seq_kv - seq_q) - WINDOW_RIGHT) : 0;
}

static inline int mask_row_end(int key0, int keys, int seq_q, int seq_kv)
{
    return WINDOW_LEFT >= 0 ? min(seq_q, key0 + keys - 1 - (seq_kv - seq_q) + WINDOW_LEFT + 1) : seq_q;
}

#endif
