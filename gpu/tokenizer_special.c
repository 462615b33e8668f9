/* gpu/tokenizer_special.c - the special-token tables built with a tokenizer.
 *
 * Two sets of ids get tables of their own. The parse_special candidates (CONTROL, USER_DEFINED
 * and UNKNOWN tokens with text) are sorted by first byte, then longest first, and bucketed by
 * that byte, so the encoder tries only the tokens that can start at a position and takes the
 * longest match first. The end-of-generation set is a boolean per id: the ids the vocabulary
 * declares (EOS, EOT, EOM) plus CONTROL tokens spelled like a turn end, since many GGUF files
 * declare only EOS while their chat template ends turns with another token.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"

static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>"};

/* Marks the end-of-generation ids in t->eog (allocated zeroed by the builder). */
void cairn__tok_mark_eog(cairn__tok *t)
{
    size_t i;
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;
    for (i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = cairn__tok_find_str(t, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (size_t)id < t->n_vocab && t->types[id] == CAIRN__TOK_CONTROL)
            t->eog[id] = 1;
    }
}

/* parse_special candidates sorted by first byte, then longest first, so a scan takes the
 * longest special token that starts at each position. */
struct special_key {
    unsigned char first;
    size_t len;
    int32_t id;
};

static int cmp_special(const void *a, const void *b)
{
    const struct special_key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int is_special_type(int ty)
{
    return ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_USER_DEFINED || ty == CAIRN__TOK_UNKNOWN;
}

int cairn__tok_build_specials(cairn__tok *t)
{
    size_t n = 0, i, b;
    struct special_key *keys;
    for (i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && t->str_off[i + 1] > t->str_off[i])
            n++;
    keys = malloc((n ? n : 1) * sizeof *keys);
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!keys || !t->special) {
        free(keys);
        return CAIRN_ENOMEM;
    }
    n = 0;
    for (i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && t->str_off[i + 1] > t->str_off[i]) {
            keys[n].first = (unsigned char)t->str[t->str_off[i]];
            keys[n].len = t->str_off[i + 1] - t->str_off[i];
            keys[n].id = (int32_t)i;
            n++;
        }
    qsort(keys, n, sizeof *keys, cmp_special);
    for (i = 0; i < n; i++)
        t->special[i] = keys[i].id;
    for (b = 0, i = 0; b < 256; b++) {
        t->special_at[b] = i;
        while (i < n && keys[i].first == b)
            i++;
    }
    t->special_at[256] = n;
    free(keys);
    return 0;
}
