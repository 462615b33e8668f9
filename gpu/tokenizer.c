/* gpu/tokenizer.c - building a tokenizer: SentencePiece-style and byte-level BPE vocabularies
 * turned into the immutable cairn__tok of tokenizer_impl.h, plus the queries on it.
 *
 * Strings are interned once at construction (tokenizer_impl.h): every vocabulary token, plus any
 * merge operand or result that is not itself a token (it gets a synthetic id >= n_vocab). Merge
 * lookup is then a hash of an id pair, with no string building in the encoder's hot loop.
 *
 * Tie-breaking, the space prefix rule and the special-token rules follow the reference GGUF
 * tokenizer (llama.cpp), so ids match it for the shipped test vectors.
 *
 * The rest of the tokenizer is split by what it does with the built tables: tokenizer_load.c
 * reads a spec out of GGUF metadata, tokenizer_special.c builds the special-token tables,
 * tokenizer_decode.c builds and reads each token's bytes, tokenizer_encode.c runs the merges.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"
#include "gpu/unicode.h"

/* Which regex each pre-tokenizer name stands for; names from GGUF files in the wild that share
 * a regex share an entry. whole: a word that is itself a token is taken whole before any merge
 * (llama3's ignore_merges), which the reference does for these names only. */
static const struct {
    const char *name;
    int pre, whole;
} pre_names[] = {
    {"default", CAIRN__PRE_GPT2, 0},      {"gpt-2", CAIRN__PRE_GPT2, 0},
    {"gpt2", CAIRN__PRE_GPT2, 0},         {"mpt", CAIRN__PRE_GPT2, 0},
    {"olmo", CAIRN__PRE_GPT2, 0},         {"jais", CAIRN__PRE_GPT2, 0},
    {"llama-bpe", CAIRN__PRE_LLAMA3, 1},  {"llama3", CAIRN__PRE_LLAMA3, 1},
    {"llama-v3", CAIRN__PRE_LLAMA3, 1},   {"falcon3", CAIRN__PRE_LLAMA3, 1},
    {"dbrx", CAIRN__PRE_LLAMA3, 0},       {"smaug-bpe", CAIRN__PRE_LLAMA3, 0},
    {"qwen2", CAIRN__PRE_QWEN2, 0},       {"deepseek-r1-qwen", CAIRN__PRE_QWEN2, 0},
    {"smollm", CAIRN__PRE_DIGITS, 0},     {"starcoder", CAIRN__PRE_DIGITS, 0},
    {"refact", CAIRN__PRE_DIGITS, 0},     {"command-r", CAIRN__PRE_DIGITS, 0},
    {"codeshell", CAIRN__PRE_DIGITS, 0},  {"exaone", CAIRN__PRE_DIGITS, 0},
    {"minerva-7b", CAIRN__PRE_DIGITS, 0},
};

void cairn__tok_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- interned strings ------------------------------------------------------------------- */

/* Growable arena used while building. */
struct builder {
    size_t str_cap, off_cap;
};

/* Adds s as string number t->n_str and indexes it. replace: a later vocabulary entry with the
 * same text takes over the slot (the reference keeps the last duplicate). */
static int add_str(cairn__tok *t, struct builder *b, const char *s, size_t len, int replace,
                   int32_t *id_out)
{
    size_t used = t->str_off[t->n_str], i;
    int32_t id;
    if (t->n_str + 2 > b->off_cap) {
        size_t cap = b->off_cap * 2;
        size_t *o = realloc(t->str_off, cap * sizeof *o);
        if (!o)
            return CAIRN_ENOMEM;
        t->str_off = o;
        b->off_cap = cap;
    }
    if (used + len + 1 > b->str_cap) {
        size_t cap = b->str_cap * 2 + len + 1;
        char *p = realloc(t->str, cap);
        if (!p)
            return CAIRN_ENOMEM;
        t->str = p;
        b->str_cap = cap;
    }
    if (len)
        memcpy(t->str + used, s, len);
    id = (int32_t)t->n_str++;
    t->str_off[t->n_str] = used + len;
    for (i = (size_t)cairn__tok_hash(s, len) & t->hmask;; i = (i + 1) & t->hmask) {
        int32_t other = t->slots[i];
        size_t l;
        const char *p;
        if (other < 0) {
            t->slots[i] = id;
            break;
        }
        p = cairn__tok_str(t, other, &l);
        if (l == len && memcmp(p, s, len) == 0) {
            if (replace)
                t->slots[i] = id;
            break;
        }
    }
    *id_out = id;
    return 0;
}

/* Id of s, interning it (as a non-token string) if new. */
static int intern(cairn__tok *t, struct builder *b, const char *s, size_t len, int32_t *id)
{
    *id = cairn__tok_find_str(t, s, len);
    if (*id >= 0)
        return 0;
    return add_str(t, b, s, len, 0, id);
}

/* ---- construction ---------------------------------------------------------------------- */

void cairn__tok_spec_init(cairn__tok_spec *s)
{
    memset(s, 0, sizeof *s);
    s->bos = s->eos = s->unk = s->pad = s->eot = s->eom = -1;
    s->add_bos = s->add_eos = s->add_space_prefix = -1;
}

void cairn__tok_free(cairn__tok *t)
{
    if (!t)
        return;
    free(t->model_name);
    free(t->pre_name);
    free(t->str);
    free(t->str_off);
    free(t->scores);
    free(t->types);
    free(t->eog);
    free(t->piece);
    free(t->piece_off);
    free(t->slots);
    free(t->pairs);
    free(t->special);
    free(t);
}

static char *dup_cstr(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * (controls, space, DEL, NBSP, soft hyphen) take U+0100.. in byte order. */
uint32_t cairn__tok_gpt2_byte_cp(unsigned b)
{
    unsigned n = 0, i;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    for (i = 0; i < b; i++)
        if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE)))
            n++;
    return 256 + n;
}

static int build(cairn__tok *t, const cairn__tok_spec *sp, char *err, size_t errlen)
{
    struct builder b;
    size_t i, total = 0, expect;
    int rc;

    if (strcmp(sp->model, "llama") == 0) {
        t->kind = CAIRN__TOK_SPM;
        t->pre = CAIRN__PRE_NONE;
    } else if (strcmp(sp->model, "gpt2") == 0) {
        const char *pre = sp->pre ? sp->pre : "default";
        t->kind = CAIRN__TOK_BPE;
        t->pre = -1;
        for (i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++)
            if (strcmp(pre, pre_names[i].name) == 0) {
                t->pre = pre_names[i].pre;
                t->ignore_merges = pre_names[i].whole;
            }
        if (t->pre < 0) {
            cairn__tok_set_err(err, errlen, "tokenizer.ggml.pre: unsupported pre-tokenizer '%s'",
                               pre);
            return CAIRN_EUNSUPPORTED;
        }
    } else {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.model: unsupported tokenizer model '%s'",
                           sp->model);
        return CAIRN_EUNSUPPORTED;
    }
    t->model_name = dup_cstr(sp->model);
    t->pre_name = dup_cstr(t->kind == CAIRN__TOK_SPM ? "" : sp->pre ? sp->pre : "default");
    if (!t->model_name || !t->pre_name)
        return CAIRN_ENOMEM;
    if (t->kind == CAIRN__TOK_BPE && sp->n_merges == 0) {
        cairn__tok_set_err(err, errlen,
                           "tokenizer.ggml.merges: missing or empty (required for gpt2)");
        return CAIRN_EFORMAT;
    }
    if (sp->n_vocab > (size_t)INT32_MAX / 4 || sp->n_merges > (size_t)INT32_MAX / 4) {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.tokens: vocabulary too large (%zu)",
                           sp->n_vocab);
        return CAIRN_EFORMAT;
    }

    t->n_vocab = sp->n_vocab;
    for (i = 0; i < sp->n_vocab; i++) {
        if (!sp->tokens[i]) {
            cairn__tok_set_err(err, errlen, "tokenizer.ggml.tokens[%zu]: NULL", i);
            return CAIRN_EINVAL;
        }
        total += sp->token_lens ? sp->token_lens[i] : strlen(sp->tokens[i]);
    }
    expect = sp->n_vocab + 3 * sp->n_merges;
    t->hmask = pow2_at_least(2 * expect + 1) - 1;
    t->slots = malloc((t->hmask + 1) * sizeof *t->slots);
    b.str_cap = total + 16;
    b.off_cap = sp->n_vocab + 16;
    t->str = malloc(b.str_cap);
    t->str_off = malloc(b.off_cap * sizeof *t->str_off);
    t->scores = malloc(sp->n_vocab * sizeof *t->scores);
    t->types = malloc(sp->n_vocab);
    t->eog = calloc(sp->n_vocab, 1);
    if (!t->slots || !t->str || !t->str_off || !t->scores || !t->types || !t->eog)
        return CAIRN_ENOMEM;
    memset(t->slots, 0xff, (t->hmask + 1) * sizeof *t->slots);
    t->str_off[0] = 0;

    for (i = 0; i < sp->n_vocab; i++) {
        int32_t id;
        int ty = sp->types ? sp->types[i] : CAIRN__TOK_NORMAL;
        if (ty < 0 || ty > CAIRN__TOK_BYTE) {
            cairn__tok_set_err(err, errlen, "tokenizer.ggml.token_type[%zu]: invalid token type %d",
                               i, ty);
            return CAIRN_EFORMAT;
        }
        rc = add_str(t, &b, sp->tokens[i],
                     sp->token_lens ? sp->token_lens[i] : strlen(sp->tokens[i]), 1, &id);
        if (rc)
            return rc;
        t->types[i] = (unsigned char)ty;
        t->scores[i] = sp->scores ? sp->scores[i] : 0.0f;
    }

    if (t->kind == CAIRN__TOK_BPE) {
        t->pmask = pow2_at_least(2 * sp->n_merges + 1) - 1;
        t->pairs = malloc((t->pmask + 1) * sizeof *t->pairs);
        if (!t->pairs)
            return CAIRN_ENOMEM;
        for (i = 0; i <= t->pmask; i++)
            t->pairs[i].l = -1;
        for (i = 0; i < sp->n_merges; i++) {
            const char *m = sp->merges[i];
            size_t len = m ? (sp->merge_lens ? sp->merge_lens[i] : strlen(m)) : 0, sep, j;
            int32_t l, r, lr;
            char stack[256], *cat;
            /* the separator is the first space after the first byte, as the reference
             * splits; a merge operand can then start with a space */
            for (sep = 1; sep < len && m[sep] != ' '; sep++)
                ;
            if (!m || sep >= len) {
                cairn__tok_set_err(err, errlen,
                                   "tokenizer.ggml.merges[%zu]: no space separating the pair", i);
                return CAIRN_EFORMAT;
            }
            if ((rc = intern(t, &b, m, sep, &l)) ||
                (rc = intern(t, &b, m + sep + 1, len - sep - 1, &r)))
                return rc;
            cat = len - 1 <= sizeof stack ? stack : malloc(len);
            if (!cat)
                return CAIRN_ENOMEM;
            memcpy(cat, m, sep);
            memcpy(cat + sep, m + sep + 1, len - sep - 1);
            rc = intern(t, &b, cat, len - 1, &lr);
            if (cat != stack)
                free(cat);
            if (rc)
                return rc;
            for (j = cairn__tok_pair_hash(l, r) & t->pmask;; j = (j + 1) & t->pmask) {
                struct cairn__tok_pair *p = &t->pairs[j];
                if (p->l == l && p->r == r)
                    break; /* a repeated merge keeps its first (best) rank */
                if (p->l < 0) {
                    p->l = l;
                    p->r = r;
                    p->rank = (int32_t)i;
                    p->merged = lr;
                    break;
                }
            }
        }
    }

    for (i = 0; i < 256; i++) {
        if (t->kind == CAIRN__TOK_SPM) {
            char buf[7], one = (char)i;
            snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)i);
            t->byte_tok[i] = cairn__tok_find_str(t, buf, 6);
            if (t->byte_tok[i] < 0)
                t->byte_tok[i] = cairn__tok_find_str(t, &one, 1);
        } else {
            uint32_t cp = cairn__tok_gpt2_byte_cp((unsigned)i);
            t->bmap_len[i] = (unsigned char)cairn__utf8_encode(cp, t->bmap[i]);
            t->byte_tok[i] = cairn__tok_find_str(t, (const char *)t->bmap[i], t->bmap_len[i]);
        }
    }

#define ID_OR_NONE(v) ((v) >= 0 && (size_t)(v) < sp->n_vocab ? (v) : -1)
    t->bos = ID_OR_NONE(sp->bos);
    t->eos = ID_OR_NONE(sp->eos);
    t->unk = ID_OR_NONE(sp->unk);
    t->pad = ID_OR_NONE(sp->pad);
    t->eot = ID_OR_NONE(sp->eot);
    t->eom = ID_OR_NONE(sp->eom);
#undef ID_OR_NONE
    t->add_bos = sp->add_bos >= 0 ? sp->add_bos != 0 : t->kind == CAIRN__TOK_SPM;
    t->add_eos = sp->add_eos >= 0 ? sp->add_eos != 0 : 0;
    t->add_space_prefix =
        sp->add_space_prefix >= 0 ? sp->add_space_prefix != 0 : t->kind == CAIRN__TOK_SPM;
    cairn__tok_fix_types(t);
    cairn__tok_mark_eog(t);
    if ((rc = cairn__tok_build_pieces(t)) || (rc = cairn__tok_build_specials(t, sp->name)))
        return rc;
    return 0;
}

int cairn__tok_new(const cairn__tok_spec *spec, cairn__tok **out, char *err, size_t errlen)
{
    cairn__tok *t;
    int rc;
    if (err && errlen)
        err[0] = 0;
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!spec || !spec->model || !spec->tokens || spec->n_vocab == 0 ||
        (spec->n_merges && !spec->merges)) {
        cairn__tok_set_err(err, errlen, "tokenizer: missing model name or empty vocabulary");
        return CAIRN_EINVAL;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    rc = build(t, spec, err, errlen);
    if (rc) {
        if (rc == CAIRN_ENOMEM)
            cairn__tok_set_err(err, errlen, "tokenizer: out of memory");
        cairn__tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- queries --------------------------------------------------------------------------- */

size_t cairn__tok_n_vocab(const cairn__tok *t) { return t ? t->n_vocab : 0; }
int32_t cairn__tok_bos(const cairn__tok *t) { return t ? t->bos : -1; }
int32_t cairn__tok_eos(const cairn__tok *t) { return t ? t->eos : -1; }
int32_t cairn__tok_eot(const cairn__tok *t) { return t ? t->eot : -1; }
int32_t cairn__tok_unk(const cairn__tok *t) { return t ? t->unk : -1; }
int32_t cairn__tok_pad(const cairn__tok *t) { return t ? t->pad : -1; }
int cairn__tok_add_bos(const cairn__tok *t) { return t ? t->add_bos : 0; }
int cairn__tok_add_eos(const cairn__tok *t) { return t ? t->add_eos : 0; }
const char *cairn__tok_kind(const cairn__tok *t) { return t ? t->model_name : ""; }
const char *cairn__tok_pre(const cairn__tok *t) { return t ? t->pre_name : ""; }

int cairn__tok_is_eog(const cairn__tok *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_vocab && t->eog[id];
}

int cairn__tok_type(const cairn__tok *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_vocab ? t->types[id] : -1;
}

int32_t cairn__tok_find(const cairn__tok *t, const char *s, size_t len)
{
    int32_t id;
    if (!t || (!s && len))
        return -1;
    id = cairn__tok_find_str(t, s ? s : "", len);
    return id >= 0 && (size_t)id < t->n_vocab ? id : -1;
}
