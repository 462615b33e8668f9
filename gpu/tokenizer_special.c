/* gpu/tokenizer_special.c - the added-token tables built with a tokenizer, by llama.cpp's rules.
 *
 * Added tokens (CONTROL, USER_DEFINED and UNKNOWN ones with text) are cut out of the text before
 * any merge. The table lists them longest first (ties: lower id first), the order in which the
 * encoder looks for each one in what is still text: a USER_DEFINED token is matched in plain
 * text too (mpt's runs of spaces, phi-3's "</s>"), CONTROL and UNKNOWN ones only when the caller
 * parses special tokens. Some models also take the spaces right of an added token with it; the
 * file does not say so, and llama.cpp keys it on general.name, as does this file (phi-3).
 *
 * Before that, tokens spelled like a turn end or a fill-in-the-middle marker become CONTROL
 * whatever type the file gives them, as llama.cpp does, so that they are never matched in plain
 * text. The end-of-generation set is a boolean per id: the ids the vocabulary declares (EOS,
 * EOT, EOM) plus the turn ends, since many GGUF files declare only EOS while their chat template
 * ends turns with another token.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"

static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>"};

/* Fill-in-the-middle markers. llama.cpp forces one of each kind to CONTROL only when the file
 * names no id for that kind; cairn reads no FIM ids, so it forces every one it finds. */
static const char *const fim_texts[] = {
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "begin\xef\xbd\x9c>",
    "<PRE>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "hole\xef\xbd\x9c>",
    "<SUF>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "end\xef\xbd\x9c>",
    "<MID>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<|file_sep|>",
};

/* DeepSeek's sentence end, taken for the EOT token (and made CONTROL) when the file names none */
static const char deepseek_eos[] = "<\xef\xbd\x9c"
                                   "end\xe2\x96\x81"
                                   "of\xe2\x96\x81"
                                   "sentence\xef\xbd\x9c>";

static void force_control(cairn__tok *t, const char *s)
{
    int32_t id = cairn__tok_find_str(t, s, strlen(s));
    if (id >= 0 && (size_t)id < t->n_vocab)
        t->types[id] = CAIRN__TOK_CONTROL;
}

void cairn__tok_fix_types(cairn__tok *t)
{
    size_t i;
    for (i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++)
        force_control(t, eog_texts[i]);
    for (i = 0; i < sizeof fim_texts / sizeof fim_texts[0]; i++)
        force_control(t, fim_texts[i]);
    if (t->eot < 0)
        force_control(t, deepseek_eos);
}

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

/* ---- the added-token table -------------------------------------------------------------- */

static size_t tok_len(const cairn__tok *t, int32_t id)
{
    return t->str_off[id + 1] - t->str_off[id];
}

static int cmp_special(const void *a, const void *b)
{
    const struct cairn__tok_special *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int is_added_type(int ty)
{
    return ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_USER_DEFINED || ty == CAIRN__TOK_UNKNOWN;
}

/* Whether general.name names a phi-3 model (llama.cpp: lower-cased, contains phi-3 or phi3). */
static int is_phi3(const char *name)
{
    char low[256];
    size_t i;
    if (!name)
        return 0;
    for (i = 0; name[i] && i + 1 < sizeof low; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = 0;
    return strstr(low, "phi-3") || strstr(low, "phi3");
}

/* phi-3: every added token takes the spaces right of it, except these */
static const char *const phi3_keep_space[] = {"<unk>", "<s>", "<|endoftext|>"};

int cairn__tok_build_specials(cairn__tok *t, const char *name)
{
    size_t n = 0, i, k;
    int phi3 = is_phi3(name);
    for (i = 0; i < t->n_vocab; i++)
        if (is_added_type(t->types[i]) && tok_len(t, (int32_t)i) > 0)
            n++;
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!t->special)
        return CAIRN_ENOMEM;
    t->n_special = 0;
    for (i = 0; i < t->n_vocab; i++) {
        struct cairn__tok_special *s = &t->special[t->n_special];
        if (!is_added_type(t->types[i]) || tok_len(t, (int32_t)i) == 0)
            continue;
        s->id = (int32_t)i;
        s->len = tok_len(t, s->id);
        s->flags = t->types[i] == CAIRN__TOK_USER_DEFINED ? CAIRN__SPECIAL_PLAIN : 0;
        if (phi3) {
            size_t l;
            const char *p = cairn__tok_str(t, s->id, &l);
            s->flags |= CAIRN__SPECIAL_RSTRIP;
            for (k = 0; k < sizeof phi3_keep_space / sizeof phi3_keep_space[0]; k++)
                if (l == strlen(phi3_keep_space[k]) && memcmp(p, phi3_keep_space[k], l) == 0)
                    s->flags &= ~(unsigned)CAIRN__SPECIAL_RSTRIP;
        }
        t->n_special++;
    }
    qsort(t->special, t->n_special, sizeof *t->special, cmp_special);
    return 0;
}
