/* gpu/tokenizer.c - SentencePiece-style and byte-level BPE tokenizers built from GGUF metadata:
 * construction, loading, decoding. The merge algorithms that encode live in tokenizer_encode.c.
 *
 * Strings are interned once at construction (tokenizer_impl.h): every vocabulary token, plus any
 * merge operand or result that is not itself a token (it gets a synthetic id >= n_vocab). Merge
 * lookup is then a hash of an id pair, with no string building in the encoder's hot loop.
 *
 * Decoding is precomputed too: every token's bytes (<0xXX> byte tokens as the byte, U+2581 as a
 * space, GPT-2's mapped code points back to raw bytes) are built once into one array, so
 * decoding is a copy per id. The stream decoder holds back an incomplete UTF-8 tail so that a
 * caller printing token by token never prints half a character.
 *
 * Tie-breaking, the space prefix rule and the special-token rules follow the reference GGUF
 * tokenizer (llama.cpp), so ids match it for the shipped test vectors.
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
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

static void set_err(char *err, size_t errlen, const char *fmt, ...)
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
static uint32_t gpt2_byte_cp(unsigned b)
{
    unsigned n = 0, i;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    for (i = 0; i < b; i++)
        if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE)))
            n++;
    return 256 + n;
}

/* Inverse of gpt2_byte_cp: byte for a code point, or -1. */
static int gpt2_cp_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 68) {
        unsigned b;
        for (b = 0; b < 256; b++)
            if (gpt2_byte_cp(b) == cp)
                return (int)b;
    }
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> XX, else -1 */
static int byte_token_value(const char *s, size_t len)
{
    int hi, lo;
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    hi = hexval(s[3]);
    lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Computes the decoded bytes of every token (what cairn__tok_piece returns). */
static int build_pieces(cairn__tok *t)
{
    size_t total = 0, i, at = 0;
    /* a decoded piece is never longer than its text */
    for (i = 0; i < t->n_vocab; i++)
        total += t->str_off[i + 1] - t->str_off[i];
    t->piece = malloc(total + 1);
    t->piece_off = malloc((t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off)
        return CAIRN_ENOMEM;
    for (i = 0; i < t->n_vocab; i++) {
        size_t len, j = 0;
        const unsigned char *s = (const unsigned char *)cairn__tok_str(t, (int32_t)i, &len);
        int type = t->types[i], bv = byte_token_value((const char *)s, len);
        unsigned char *out = (unsigned char *)t->piece + at;
        t->piece_off[i] = at;
        if (type == CAIRN__TOK_BYTE && bv >= 0) {
            out[0] = (unsigned char)bv;
            at += 1;
            continue;
        }
        if (type == CAIRN__TOK_CONTROL || type == CAIRN__TOK_USER_DEFINED ||
            type == CAIRN__TOK_UNKNOWN) {
            memcpy(out, s, len);
            at += len;
            continue;
        }
        while (j < len) {
            uint32_t cp;
            size_t n = cairn__utf8_decode(s + j, len - j, &cp);
            int b;
            if (t->kind == CAIRN__TOK_SPM && cp == 0x2581 && n == 3) {
                *out++ = ' ';
            } else if (t->kind == CAIRN__TOK_BPE && n == (size_t)(s[j] < 0x80 ? 1 : 2) &&
                       (b = gpt2_cp_byte(cp)) >= 0) {
                *out++ = (unsigned char)b;
            } else { /* not part of the encoding: keep the text's own bytes */
                memcpy(out, s + j, n);
                out += n;
            }
            j += n;
        }
        at = (size_t)(out - (unsigned char *)t->piece);
    }
    t->piece_off[t->n_vocab] = at;
    return 0;
}

static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>"};

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

static int build_specials(cairn__tok *t)
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
            set_err(err, errlen, "tokenizer.ggml.pre: unsupported pre-tokenizer '%s'", pre);
            return CAIRN_EUNSUPPORTED;
        }
    } else {
        set_err(err, errlen, "tokenizer.ggml.model: unsupported tokenizer model '%s'", sp->model);
        return CAIRN_EUNSUPPORTED;
    }
    t->model_name = dup_cstr(sp->model);
    t->pre_name = dup_cstr(t->kind == CAIRN__TOK_SPM ? "" : sp->pre ? sp->pre : "default");
    if (!t->model_name || !t->pre_name)
        return CAIRN_ENOMEM;
    if (t->kind == CAIRN__TOK_BPE && sp->n_merges == 0) {
        set_err(err, errlen, "tokenizer.ggml.merges: missing or empty (required for gpt2)");
        return CAIRN_EFORMAT;
    }
    if (sp->n_vocab > (size_t)INT32_MAX / 4 || sp->n_merges > (size_t)INT32_MAX / 4) {
        set_err(err, errlen, "tokenizer.ggml.tokens: vocabulary too large (%zu)", sp->n_vocab);
        return CAIRN_EFORMAT;
    }

    t->n_vocab = sp->n_vocab;
    for (i = 0; i < sp->n_vocab; i++) {
        if (!sp->tokens[i]) {
            set_err(err, errlen, "tokenizer.ggml.tokens[%zu]: NULL", i);
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
            set_err(err, errlen, "tokenizer.ggml.token_type[%zu]: invalid token type %d", i, ty);
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
                set_err(err, errlen, "tokenizer.ggml.merges[%zu]: no space separating the pair", i);
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
            uint32_t cp = gpt2_byte_cp((unsigned)i);
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
    if ((rc = build_pieces(t)) || (rc = build_specials(t)))
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
        set_err(err, errlen, "tokenizer: missing model name or empty vocabulary");
        return CAIRN_EINVAL;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    rc = build(t, spec, err, errlen);
    if (rc) {
        if (rc == CAIRN_ENOMEM)
            set_err(err, errlen, "tokenizer: out of memory");
        cairn__tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- loading from GGUF ----------------------------------------------------------------- */

static int gguf_id(const cairn__gguf *g, const char *key, int32_t *out, char *err, size_t errlen)
{
    int64_t v;
    int rc = cairn__gguf_get_i64(g, key, &v);
    *out = -1;
    if (rc == CAIRN_ENOTFOUND)
        return 0;
    if (rc) {
        set_err(err, errlen, "%s: not an integer", key);
        return CAIRN_EFORMAT;
    }
    *out = v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
    return 0;
}

static int gguf_flag(const cairn__gguf *g, const char *key, int *out, char *err, size_t errlen)
{
    int rc = cairn__gguf_get_bool(g, key, out);
    if (rc == CAIRN_ENOTFOUND) {
        *out = -1;
        return 0;
    }
    if (rc) {
        set_err(err, errlen, "%s: not a boolean", key);
        return CAIRN_EFORMAT;
    }
    return 0;
}

static int gguf_strarr(const cairn__gguf *g, const char *key, const char ***v, size_t **lens,
                       size_t *n, char *err, size_t errlen)
{
    int et, rc;
    uint64_t cnt, i;
    *v = NULL;
    *lens = NULL;
    *n = 0;
    rc = cairn__gguf_get_arr(g, key, &et, &cnt);
    if (rc == CAIRN_ENOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc || et != CAIRN__GGUF_STRING) {
        set_err(err, errlen, "%s: not an array of strings", key);
        return CAIRN_EFORMAT;
    }
    if (cnt > (uint64_t)INT32_MAX / 4) {
        set_err(err, errlen, "%s: too many entries (%llu)", key, (unsigned long long)cnt);
        return CAIRN_EFORMAT;
    }
    *v = malloc((cnt ? cnt : 1) * sizeof **v);
    *lens = malloc((cnt ? cnt : 1) * sizeof **lens);
    if (!*v || !*lens)
        return CAIRN_ENOMEM;
    for (i = 0; i < cnt; i++) {
        if (cairn__gguf_arr_str(g, key, i, &(*v)[i], &(*lens)[i])) {
            set_err(err, errlen, "%s[%llu]: unreadable string", key, (unsigned long long)i);
            return CAIRN_EFORMAT;
        }
    }
    *n = (size_t)cnt;
    return 0;
}

int cairn__tok_load(const cairn__gguf *g, cairn__tok **out, char *err, size_t errlen)
{
    cairn__tok_spec sp;
    const char **tokens = NULL, **merges = NULL;
    size_t *tok_lens = NULL, *merge_lens = NULL, n_tok = 0, n_merges = 0, slen;
    float *scores = NULL;
    int32_t *types = NULL;
    char model[64], pre[64];
    const char *s;
    uint64_t cnt, i;
    int rc, et;

    if (err && errlen)
        err[0] = 0;
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!g)
        return CAIRN_EINVAL;
    cairn__tok_spec_init(&sp);

    rc = cairn__gguf_get_str(g, "tokenizer.ggml.model", &s, &slen);
    if (rc || slen == 0 || slen >= sizeof model || memchr(s, 0, slen)) {
        set_err(err, errlen, "tokenizer.ggml.model: %s",
                rc == CAIRN_ENOTFOUND ? "missing (the file has no tokenizer)"
                                      : "not a valid string");
        return CAIRN_EFORMAT;
    }
    memcpy(model, s, slen);
    model[slen] = 0;
    sp.model = model;
    rc = cairn__gguf_get_str(g, "tokenizer.ggml.pre", &s, &slen);
    if (rc == 0) {
        if (slen >= sizeof pre || memchr(s, 0, slen)) {
            set_err(err, errlen, "tokenizer.ggml.pre: not a valid name");
            return CAIRN_EFORMAT;
        }
        memcpy(pre, s, slen);
        pre[slen] = 0;
        sp.pre = pre;
    } else if (rc != CAIRN_ENOTFOUND) {
        set_err(err, errlen, "tokenizer.ggml.pre: not a string");
        return CAIRN_EFORMAT;
    }

    rc = gguf_strarr(g, "tokenizer.ggml.tokens", &tokens, &tok_lens, &n_tok, err, errlen);
    if (rc == CAIRN_ENOTFOUND || (rc == 0 && n_tok == 0)) {
        set_err(err, errlen, "tokenizer.ggml.tokens: missing or empty");
        rc = CAIRN_EFORMAT;
    }
    if (rc)
        goto done;
    sp.tokens = tokens;
    sp.token_lens = tok_lens;
    sp.n_vocab = n_tok;

    rc = cairn__gguf_get_arr(g, "tokenizer.ggml.scores", &et, &cnt);
    if (rc == 0) {
        if (cnt != n_tok) {
            set_err(err, errlen, "tokenizer.ggml.scores: %llu entries for %zu tokens",
                    (unsigned long long)cnt, n_tok);
            rc = CAIRN_EFORMAT;
            goto done;
        }
        if (!(scores = malloc(n_tok * sizeof *scores))) {
            rc = CAIRN_ENOMEM;
            goto done;
        }
        for (i = 0; i < cnt; i++)
            if (cairn__gguf_arr_f32(g, "tokenizer.ggml.scores", i, &scores[i])) {
                set_err(err, errlen, "tokenizer.ggml.scores[%llu]: not a number",
                        (unsigned long long)i);
                rc = CAIRN_EFORMAT;
                goto done;
            }
        sp.scores = scores;
    } else if (rc != CAIRN_ENOTFOUND) {
        set_err(err, errlen, "tokenizer.ggml.scores: not an array");
        rc = CAIRN_EFORMAT;
        goto done;
    }

    rc = cairn__gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &cnt);
    if (rc == 0) {
        if (cnt != n_tok) {
            set_err(err, errlen, "tokenizer.ggml.token_type: %llu entries for %zu tokens",
                    (unsigned long long)cnt, n_tok);
            rc = CAIRN_EFORMAT;
            goto done;
        }
        if (!(types = malloc(n_tok * sizeof *types))) {
            rc = CAIRN_ENOMEM;
            goto done;
        }
        for (i = 0; i < cnt; i++) {
            int64_t v;
            if (cairn__gguf_arr_i64(g, "tokenizer.ggml.token_type", i, &v) || v < 0 || v > 6) {
                set_err(err, errlen, "tokenizer.ggml.token_type[%llu]: not a token type (0..6)",
                        (unsigned long long)i);
                rc = CAIRN_EFORMAT;
                goto done;
            }
            types[i] = (int32_t)v;
        }
        sp.types = types;
    } else if (rc != CAIRN_ENOTFOUND) {
        set_err(err, errlen, "tokenizer.ggml.token_type: not an array");
        rc = CAIRN_EFORMAT;
        goto done;
    }

    rc = gguf_strarr(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merges, err, errlen);
    if (rc && rc != CAIRN_ENOTFOUND)
        goto done;
    sp.merges = merges;
    sp.merge_lens = merge_lens;
    sp.n_merges = n_merges;

    if ((rc = gguf_id(g, "tokenizer.ggml.bos_token_id", &sp.bos, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eos_token_id", &sp.eos, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.unknown_token_id", &sp.unk, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.padding_token_id", &sp.pad, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eot_token_id", &sp.eot, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eom_token_id", &sp.eom, err, errlen)) ||
        (rc = gguf_flag(g, "tokenizer.ggml.add_bos_token", &sp.add_bos, err, errlen)) ||
        (rc = gguf_flag(g, "tokenizer.ggml.add_eos_token", &sp.add_eos, err, errlen)) ||
        (rc = gguf_flag(g, "tokenizer.ggml.add_space_prefix", &sp.add_space_prefix, err, errlen)))
        goto done;
    /* SentencePiece vocabularies without the keys use the classic ids */
    if (strcmp(model, "llama") == 0) {
        if (cairn__gguf_kv_type(g, "tokenizer.ggml.bos_token_id") == CAIRN_ENOTFOUND)
            sp.bos = 1;
        if (cairn__gguf_kv_type(g, "tokenizer.ggml.eos_token_id") == CAIRN_ENOTFOUND)
            sp.eos = 2;
        if (cairn__gguf_kv_type(g, "tokenizer.ggml.unknown_token_id") == CAIRN_ENOTFOUND)
            sp.unk = 0;
    }
    rc = cairn__tok_new(&sp, out, err, errlen);
done:
    if (rc == CAIRN_ENOMEM && err && errlen && !err[0])
        set_err(err, errlen, "tokenizer: out of memory");
    free(tokens);
    free(tok_lens);
    free(merges);
    free(merge_lens);
    free(scores);
    free(types);
    return rc;
}

/* ---- decode ---------------------------------------------------------------------------- */

int cairn__tok_piece(const cairn__tok *t, int32_t id, const char **bytes, size_t *len)
{
    if (!t || id < 0 || (size_t)id >= t->n_vocab || !bytes || !len)
        return CAIRN_EINVAL;
    *bytes = t->piece + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return 0;
}

/* The bytes of id as decoding renders them: nothing for CONTROL/UNKNOWN unless asked. */
static void rendered(const cairn__tok *t, int32_t id, unsigned flags, const char **s, size_t *len)
{
    int ty = t->types[id];
    *s = t->piece + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    if ((ty == CAIRN__TOK_CONTROL || ty == CAIRN__TOK_UNKNOWN) &&
        !(flags & CAIRN__TOK_DECODE_SPECIAL))
        *len = 0;
}

int cairn__tok_decode(const cairn__tok *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                      size_t *len)
{
    size_t total = 0, i, at = 0;
    int strip = (flags & CAIRN__TOK_DECODE_STRIP_SPACE) && t && t->add_space_prefix;
    char *p;
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!t || !out || !len || (!ids && n))
        return CAIRN_EINVAL;
    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab)
            return CAIRN_EINVAL;
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    if (!(p = malloc(total + 1)))
        return CAIRN_ENOMEM;
    for (i = 0; i < n; i++) {
        const char *s;
        size_t l;
        rendered(t, ids[i], flags, &s, &l);
        if (strip && l) {
            if (s[0] == ' ') {
                s++;
                l--;
            }
            strip = 0;
        }
        memcpy(p + at, s, l);
        at += l;
    }
    p[at] = 0;
    *out = p;
    *len = at;
    return 0;
}

struct cairn__tok_stream {
    const cairn__tok *t;
    unsigned flags;
    int strip;
    char *buf;
    size_t held, cap, out_len; /* buf[out_len .. out_len + held) is the held-back tail */
};

cairn__tok_stream *cairn__tok_stream_new(const cairn__tok *t, unsigned flags)
{
    cairn__tok_stream *s;
    if (!t)
        return NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->flags = flags;
    s->strip = (flags & CAIRN__TOK_DECODE_STRIP_SPACE) && t->add_space_prefix;
    return s;
}

int cairn__tok_stream_push(cairn__tok_stream *s, int32_t id, const char **out, size_t *len)
{
    const char *p;
    size_t l, n, tail;
    if (!s || !out || !len || id < 0 || (size_t)id >= s->t->n_vocab)
        return CAIRN_EINVAL;
    rendered(s->t, id, s->flags, &p, &l);
    if (s->strip && l) {
        if (p[0] == ' ') {
            p++;
            l--;
        }
        s->strip = 0;
    }
    /* move the held tail to the front, then append the new piece */
    if (s->held)
        memmove(s->buf, s->buf + s->out_len, s->held);
    n = s->held + l;
    if (n > s->cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return CAIRN_ENOMEM;
        s->buf = b;
        s->cap = cap;
    }
    if (l)
        memcpy(s->buf + s->held, p, l);
    tail = cairn__utf8_incomplete_tail((const unsigned char *)s->buf, n);
    s->out_len = n - tail;
    s->held = tail;
    *out = s->buf ? s->buf : "";
    *len = s->out_len;
    return 0;
}

int cairn__tok_stream_flush(cairn__tok_stream *s, const char **out, size_t *len)
{
    if (!s || !out || !len)
        return CAIRN_EINVAL;
    *out = s->buf ? s->buf + s->out_len : "";
    *len = s->held;
    s->out_len += s->held;
    s->held = 0;
    return 0;
}

void cairn__tok_stream_free(cairn__tok_stream *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
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
