/* gpu/tokenizer.c - SentencePiece-style and byte-level BPE tokenizers built from GGUF metadata.
 *
 * Both families are "merge adjacent symbols until nothing merges" over a doubly linked list of
 * symbols, driven by a binary heap of candidate pairs, so a long word (or an SPM prompt, which
 * has no pre-tokenization at all) costs O(n log n) rather than a rescan per merge:
 *   - llama (SPM): symbols start as UTF-8 characters; a pair is a candidate if its concatenated
 *     text is a vocabulary token, and the pair whose token has the highest score merges first
 *     (ties: leftmost). Symbols left that are not tokens fall back to <0xXX> byte tokens.
 *   - gpt2: the text is first cut into words by a hand-written matcher equivalent to the
 *     pre-tokenizer regex; each word's bytes are mapped to GPT-2's printable code points and
 *     pairs merge in merges-list order (lowest rank first, ties: leftmost).
 * A heap entry remembers what it was built from and is skipped when popped stale (a side merged
 * away or changed), instead of being removed eagerly.
 *
 * Strings are interned once at construction: every vocabulary token, plus any merge operand or
 * result that is not itself a token (it gets a synthetic id >= n_vocab). Merge lookup is then a
 * hash of an id pair, with no string building in the hot loop. Stale-entry checks compare ids.
 *
 * Tie-breaking, the space prefix rule and the special-token rules follow the reference GGUF
 * tokenizer (llama.cpp), so ids match it for the shipped test vectors.
 */
#include "gpu/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "gpu/unicode.h"

enum { KIND_SPM = 0, KIND_BPE = 1 };
enum { PRE_NONE, PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_DIGITS };

/* Which regex each pre-tokenizer name stands for; names from GGUF files in the wild that share
 * a regex share an entry. whole: a word that is itself a token is taken whole before any merge
 * (llama3's ignore_merges), which the reference does for these names only. */
static const struct {
    const char *name;
    int pre, whole;
} pre_names[] = {
    {"default", PRE_GPT2, 0},      {"gpt-2", PRE_GPT2, 0},
    {"gpt2", PRE_GPT2, 0},         {"mpt", PRE_GPT2, 0},
    {"olmo", PRE_GPT2, 0},         {"jais", PRE_GPT2, 0},
    {"llama-bpe", PRE_LLAMA3, 1},  {"llama3", PRE_LLAMA3, 1},
    {"llama-v3", PRE_LLAMA3, 1},   {"falcon3", PRE_LLAMA3, 1},
    {"dbrx", PRE_LLAMA3, 0},       {"smaug-bpe", PRE_LLAMA3, 0},
    {"qwen2", PRE_QWEN2, 0},       {"deepseek-r1-qwen", PRE_QWEN2, 0},
    {"smollm", PRE_DIGITS, 0},     {"starcoder", PRE_DIGITS, 0},
    {"refact", PRE_DIGITS, 0},     {"command-r", PRE_DIGITS, 0},
    {"codeshell", PRE_DIGITS, 0},  {"exaone", PRE_DIGITS, 0},
    {"minerva-7b", PRE_DIGITS, 0},
};

struct pair_slot {
    int32_t l, r; /* l == -1: empty */
    int32_t rank, merged;
};

struct cairn__tok {
    int kind, pre, ignore_merges;
    char *model_name, *pre_name;
    size_t n_vocab, n_str; /* n_str = n_vocab + interned non-token merge strings */
    char *str;             /* all interned strings back to back */
    size_t *str_off;       /* n_str + 1 offsets into str */
    float *scores;         /* n_vocab */
    unsigned char *types;  /* n_vocab */
    unsigned char *eog;    /* n_vocab booleans */
    char *piece;           /* decoded bytes of every token */
    size_t *piece_off;     /* n_vocab + 1 */
    int32_t *slots;        /* string hash: id or -1; hmask + 1 entries */
    size_t hmask;
    struct pair_slot *pairs; /* merge hash; pmask + 1 entries (NULL for SPM) */
    size_t pmask;
    int32_t byte_tok[256]; /* SPM: <0xXX> fallback; BPE: id of the byte's mapped character */
    unsigned char bmap[256][2], bmap_len[256]; /* BPE: UTF-8 of each byte's mapped code point */
    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;
    int32_t *special;       /* parse_special candidates, by first byte then longest first */
    size_t special_at[257]; /* special[special_at[b] .. special_at[b+1]) start with byte b */
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

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static const char *str_at(const cairn__tok *t, int32_t id, size_t *len)
{
    *len = t->str_off[id + 1] - t->str_off[id];
    return t->str + t->str_off[id];
}

static int32_t find_str(const cairn__tok *t, const char *s, size_t len)
{
    size_t i = (size_t)hash_bytes(s, len) & t->hmask;
    for (;; i = (i + 1) & t->hmask) {
        int32_t id = t->slots[i];
        size_t l;
        const char *p;
        if (id < 0)
            return -1;
        p = str_at(t, id, &l);
        if (l == len && memcmp(p, s, len) == 0)
            return id;
    }
}

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
    for (i = (size_t)hash_bytes(s, len) & t->hmask;; i = (i + 1) & t->hmask) {
        int32_t other = t->slots[i];
        size_t l;
        const char *p;
        if (other < 0) {
            t->slots[i] = id;
            break;
        }
        p = str_at(t, other, &l);
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
    *id = find_str(t, s, len);
    if (*id >= 0)
        return 0;
    return add_str(t, b, s, len, 0, id);
}

/* ---- merge pairs ----------------------------------------------------------------------- */

static size_t pair_hash(int32_t l, int32_t r)
{
    uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static const struct pair_slot *find_pair(const cairn__tok *t, int32_t l, int32_t r)
{
    size_t i;
    if (l < 0 || r < 0)
        return NULL;
    for (i = pair_hash(l, r) & t->pmask;; i = (i + 1) & t->pmask) {
        const struct pair_slot *p = &t->pairs[i];
        if (p->l < 0)
            return NULL;
        if (p->l == l && p->r == r)
            return p;
    }
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
        const unsigned char *s = (const unsigned char *)str_at(t, (int32_t)i, &len);
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
            if (t->kind == KIND_SPM && cp == 0x2581 && n == 3) {
                *out++ = ' ';
            } else if (t->kind == KIND_BPE && n == (size_t)(s[j] < 0x80 ? 1 : 2) &&
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
        t->kind = KIND_SPM;
        t->pre = PRE_NONE;
    } else if (strcmp(sp->model, "gpt2") == 0) {
        const char *pre = sp->pre ? sp->pre : "default";
        t->kind = KIND_BPE;
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
    t->pre_name = dup_cstr(t->kind == KIND_SPM ? "" : sp->pre ? sp->pre : "default");
    if (!t->model_name || !t->pre_name)
        return CAIRN_ENOMEM;
    if (t->kind == KIND_BPE && sp->n_merges == 0) {
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

    if (t->kind == KIND_BPE) {
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
            for (j = pair_hash(l, r) & t->pmask;; j = (j + 1) & t->pmask) {
                struct pair_slot *p = &t->pairs[j];
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
        if (t->kind == KIND_SPM) {
            char buf[7], one = (char)i;
            snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)i);
            t->byte_tok[i] = find_str(t, buf, 6);
            if (t->byte_tok[i] < 0)
                t->byte_tok[i] = find_str(t, &one, 1);
        } else {
            uint32_t cp = gpt2_byte_cp((unsigned)i);
            t->bmap_len[i] = (unsigned char)cairn__utf8_encode(cp, t->bmap[i]);
            t->byte_tok[i] = find_str(t, (const char *)t->bmap[i], t->bmap_len[i]);
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
    t->add_bos = sp->add_bos >= 0 ? sp->add_bos != 0 : t->kind == KIND_SPM;
    t->add_eos = sp->add_eos >= 0 ? sp->add_eos != 0 : 0;
    t->add_space_prefix =
        sp->add_space_prefix >= 0 ? sp->add_space_prefix != 0 : t->kind == KIND_SPM;
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;
    for (i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = find_str(t, eog_texts[i], strlen(eog_texts[i]));
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

/* ---- output vector ---------------------------------------------------------------------- */

struct ids {
    int32_t *v;
    size_t n, cap;
    int err;
};

static void push(struct ids *o, int32_t id)
{
    if (o->err)
        return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            o->err = CAIRN_ENOMEM;
            return;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---- candidate-pair heap ----------------------------------------------------------------- */

/* One entry serves both families: SPM orders by score (higher first), BPE by rank (lower
 * first, stored negated in score's place as key); ties go to the leftmost pair. */
struct cand {
    double key; /* larger merges first */
    size_t left, right;
    int32_t a, b; /* SPM: byte length of the pair; BPE: ids of the two sides when pushed */
};

struct heap {
    struct cand *v;
    size_t n, cap;
};

static int cand_before(const struct cand *x, const struct cand *y)
{
    return x->key > y->key || (x->key == y->key && x->left < y->left);
}

static int heap_push(struct heap *h, struct cand c)
{
    size_t i;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct cand *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return CAIRN_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    i = h->n++;
    while (i > 0 && cand_before(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return 0;
}

static struct cand heap_pop(struct heap *h)
{
    struct cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && cand_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!cand_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Symbols of the merge list: a byte span of the work text, linked to its live neighbours. */
struct sym {
    size_t start, len;
    size_t prev, next; /* NONE at the ends */
    int32_t id;        /* BPE: string id of the span (token, synthetic, or -1) */
};
#define NONE ((size_t)-1)

struct work {
    struct sym *s;
    size_t cap;
    struct heap h;
    unsigned char *m; /* a word in mapped form, for ignore_merges */
    size_t mcap;
};

static int work_reserve(struct work *w, size_t n)
{
    if (n > w->cap) {
        struct sym *s = realloc(w->s, n * sizeof *s);
        if (!s)
            return CAIRN_ENOMEM;
        w->s = s;
        w->cap = n;
    }
    w->h.n = 0;
    return 0;
}

/* ---- llama (SPM) ---------------------------------------------------------------------- */

static int spm_try_pair(const cairn__tok *t, struct work *w, const char *text, size_t l, size_t r)
{
    int32_t id;
    struct cand c;
    if (l == NONE || r == NONE)
        return 0;
    id = find_str(t, text + w->s[l].start, w->s[l].len + w->s[r].len);
    if (id < 0 || (size_t)id >= t->n_vocab)
        return 0;
    c.key = t->scores[id];
    c.left = l;
    c.right = r;
    c.a = (int32_t)(w->s[l].len + w->s[r].len);
    c.b = id;
    return heap_push(&w->h, c);
}

/* Tokenizes one stretch of text, with spaces already written as U+2581. */
static int spm_fragment(const cairn__tok *t, struct work *w, const char *text, size_t len,
                        struct ids *o)
{
    size_t n = 0, pos = 0, i;
    int rc;
    if ((rc = work_reserve(w, len)))
        return rc;
    while (pos < len) {
        uint32_t cp;
        size_t k = cairn__utf8_decode((const unsigned char *)text + pos, len - pos, &cp);
        w->s[n].start = pos;
        w->s[n].len = k;
        w->s[n].prev = n ? n - 1 : NONE;
        w->s[n].next = pos + k < len ? n + 1 : NONE;
        n++;
        pos += k;
    }
    for (i = 1; i < n; i++)
        if ((rc = spm_try_pair(t, w, text, i - 1, i)))
            return rc;
    while (w->h.n) {
        struct cand c = heap_pop(&w->h);
        struct sym *L = &w->s[c.left], *R = &w->s[c.right];
        /* stale: a side was merged away, or grew, since this pair was proposed */
        if (L->len == 0 || R->len == 0 || L->len + R->len != (size_t)c.a)
            continue;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next != NONE)
            w->s[R->next].prev = c.left;
        if ((rc = spm_try_pair(t, w, text, L->prev, c.left)) ||
            (rc = spm_try_pair(t, w, text, c.left, L->next)))
            return rc;
    }
    for (i = n ? 0 : NONE; i != NONE; i = w->s[i].next) {
        const struct sym *s = &w->s[i];
        int32_t id = find_str(t, text + s->start, s->len);
        if (id >= 0 && (size_t)id < t->n_vocab) {
            push(o, id);
        } else { /* not a piece of the vocabulary: spell it in byte tokens */
            size_t j;
            for (j = 0; j < s->len; j++) {
                int32_t b = t->byte_tok[(unsigned char)text[s->start + j]];
                if (b < 0)
                    b = t->unk;
                if (b >= 0)
                    push(o, b);
            }
        }
    }
    return o->err;
}

static int spm_encode(const cairn__tok *t, struct work *w, const char *text, size_t len, int prefix,
                      struct ids *o, char **buf, size_t *bufcap)
{
    size_t need = (len + 1) * 3, i, n = 0;
    if (need > *bufcap) {
        char *p = realloc(*buf, need);
        if (!p)
            return CAIRN_ENOMEM;
        *buf = p;
        *bufcap = need;
    }
    if (prefix) {
        memcpy(*buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(*buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            (*buf)[n++] = text[i];
        }
    }
    return spm_fragment(t, w, *buf, n, o);
}

/* ---- gpt2 (byte-level BPE) ------------------------------------------------------------ */

static int bpe_try_pair(const cairn__tok *t, struct work *w, size_t l, size_t r)
{
    const struct pair_slot *p;
    struct cand c;
    if (l == NONE || r == NONE)
        return 0;
    p = find_pair(t, w->s[l].id, w->s[r].id);
    if (!p)
        return 0;
    c.key = -(double)p->rank;
    c.left = l;
    c.right = r;
    c.a = w->s[l].id;
    c.b = w->s[r].id;
    return heap_push(&w->h, c);
}

/* Emits the tokens of one pre-tokenized word (raw bytes). */
static int bpe_word(const cairn__tok *t, struct work *w, const unsigned char *word, size_t len,
                    struct ids *o)
{
    size_t i;
    int rc;
    if (len == 0)
        return 0;
    if (t->ignore_merges) {
        /* llama3-style vocabularies take a whole word that is itself a token as is */
        size_t n = 0;
        int32_t id;
        if (2 * len > w->mcap) {
            unsigned char *m = realloc(w->m, 2 * len);
            if (!m)
                return CAIRN_ENOMEM;
            w->m = m;
            w->mcap = 2 * len;
        }
        for (i = 0; i < len; i++) {
            memcpy(w->m + n, t->bmap[word[i]], t->bmap_len[word[i]]);
            n += t->bmap_len[word[i]];
        }
        id = find_str(t, (const char *)w->m, n);
        if (id >= 0 && (size_t)id < t->n_vocab) {
            push(o, id);
            return o->err;
        }
    }
    if ((rc = work_reserve(w, len)))
        return rc;
    for (i = 0; i < len; i++) {
        w->s[i].start = i;
        w->s[i].len = 1;
        w->s[i].prev = i ? i - 1 : NONE;
        w->s[i].next = i + 1 < len ? i + 1 : NONE;
        w->s[i].id = t->byte_tok[word[i]];
    }
    for (i = 1; i < len; i++)
        if ((rc = bpe_try_pair(t, w, i - 1, i)))
            return rc;
    while (w->h.n) {
        struct cand c = heap_pop(&w->h);
        struct sym *L = &w->s[c.left], *R = &w->s[c.right];
        const struct pair_slot *p;
        if (L->len == 0 || R->len == 0 || L->id != c.a || R->id != c.b || L->next != c.right)
            continue;
        p = find_pair(t, L->id, R->id);
        L->id = p->merged;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next != NONE)
            w->s[R->next].prev = c.left;
        if ((rc = bpe_try_pair(t, w, L->prev, c.left)) ||
            (rc = bpe_try_pair(t, w, c.left, L->next)))
            return rc;
    }
    for (i = 0; i != NONE; i = w->s[i].next) {
        const struct sym *s = &w->s[i];
        if (s->id >= 0 && (size_t)s->id < t->n_vocab) {
            push(o, s->id);
        } else { /* merged into a string that is no token: fall back to its bytes */
            size_t j;
            for (j = s->start; j < s->start + s->len; j++) {
                int32_t b = t->byte_tok[word[j]];
                if (b < 0 || (size_t)b >= t->n_vocab)
                    b = t->unk;
                if (b >= 0)
                    push(o, b);
            }
        }
    }
    return o->err;
}

/* Pre-tokenizer state: the fragment decoded into code point units. */
struct units {
    const unsigned char *text;
    uint32_t *cp;
    unsigned char *cls;
    size_t *off; /* n + 1 byte offsets */
    size_t n;
};

#define END_CLASS 4 /* "no character": beyond the segment */

static int emit_word(const cairn__tok *t, struct work *w, const struct units *u, size_t a, size_t b,
                     struct ids *o)
{
    return bpe_word(t, w, u->text + u->off[a], u->off[b] - u->off[a], o);
}

static int cls_at(const struct units *u, size_t i, size_t hi)
{
    return i < hi ? u->cls[i] : END_CLASS;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Length of a contraction ('s 't 're 've 'm 'll 'd) at i, or 0. fold: case-insensitive. */
static size_t contraction(const struct units *u, size_t i, size_t hi, int fold)
{
    uint32_t a, b;
    if (u->cp[i] != '\'' || i + 1 >= hi)
        return 0;
    a = fold ? ascii_lower(u->cp[i + 1]) : u->cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (i + 2 >= hi)
        return 0;
    b = fold ? ascii_lower(u->cp[i + 2]) : u->cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* Shared tail of both regexes: \s+(?!\S)|\s+ (llama3 first tries \s*[\r\n]+). Returns the end. */
static size_t match_space(const struct units *u, size_t pos, size_t hi, int newline_rule)
{
    size_t n = 0, last_nl = 0;
    while (pos + n < hi && u->cls[pos + n] == CAIRN__UC_SPACE) {
        if (u->cp[pos + n] == '\r' || u->cp[pos + n] == '\n')
            last_nl = pos + n + 1;
        n++;
    }
    if (newline_rule && last_nl)
        return last_nl;
    if (n > 1 && pos + n < hi) /* leave the last space to prefix the next word */
        return pos + n - 1;
    return n ? pos + n : pos + 1;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over units
 * [lo, hi); the segment's ends act as the ends of the text. */
static int pre_gpt2(const cairn__tok *t, struct work *w, const struct units *u, size_t lo,
                    size_t hi, struct ids *o)
{
    size_t pos = lo;
    int rc;
    while (pos < hi) {
        size_t start = pos, k = contraction(u, pos, hi, 0);
        int sp = u->cp[pos] == ' ', c2 = sp ? cls_at(u, pos + 1, hi) : u->cls[pos];
        if (k) {
            pos += k;
        } else if (c2 == CAIRN__UC_LETTER || c2 == CAIRN__UC_NUMBER || c2 == CAIRN__UC_OTHER) {
            pos += (size_t)sp;
            while (pos < hi && u->cls[pos] == c2)
                pos++;
        } else {
            pos = match_space(u, pos, hi, 0);
        }
        if ((rc = emit_word(t, w, u, start, pos, o)))
            return rc;
    }
    return 0;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int pre_llama3(const cairn__tok *t, struct work *w, const struct units *u, size_t lo,
                      size_t hi, size_t max_digits, struct ids *o)
{
    size_t pos = lo;
    int rc;
    while (pos < hi) {
        size_t start = pos, k = contraction(u, pos, hi, 1);
        uint32_t c = u->cp[pos];
        int cl = u->cls[pos], sp = c == ' ', c2 = sp ? cls_at(u, pos + 1, hi) : cl;
        if (k) {
            pos += k;
        } else if (c != '\r' && c != '\n' && cl != CAIRN__UC_NUMBER &&
                   (cl == CAIRN__UC_LETTER || cls_at(u, pos + 1, hi) == CAIRN__UC_LETTER)) {
            pos++;
            while (pos < hi && u->cls[pos] == CAIRN__UC_LETTER)
                pos++;
        } else if (cl == CAIRN__UC_NUMBER) {
            while (pos < hi && u->cls[pos] == CAIRN__UC_NUMBER && pos - start < max_digits)
                pos++;
        } else if (c2 == CAIRN__UC_OTHER) {
            pos += (size_t)sp;
            while (pos < hi && u->cls[pos] == CAIRN__UC_OTHER)
                pos++;
            while (pos < hi && (u->cp[pos] == '\r' || u->cp[pos] == '\n'))
                pos++;
        } else {
            pos = match_space(u, pos, hi, 1);
        }
        if ((rc = emit_word(t, w, u, start, pos, o)))
            return rc;
    }
    return 0;
}

static int bpe_encode(const cairn__tok *t, struct work *w, const char *text, size_t len,
                      struct ids *o)
{
    struct units u;
    size_t pos = 0, i;
    int rc = 0;
    if (len == 0)
        return 0;
    u.text = (const unsigned char *)text;
    u.cp = malloc(len * sizeof *u.cp);
    u.cls = malloc(len);
    u.off = malloc((len + 1) * sizeof *u.off);
    if (!u.cp || !u.cls || !u.off) {
        rc = CAIRN_ENOMEM;
        goto done;
    }
    for (u.n = 0; pos < len; u.n++) {
        size_t k = cairn__utf8_decode(u.text + pos, len - pos, &u.cp[u.n]);
        u.cls[u.n] = (unsigned char)cairn__uc_class(u.cp[u.n]);
        u.off[u.n] = pos;
        pos += k;
    }
    u.off[u.n] = len;
    switch (t->pre) {
    case PRE_LLAMA3:
        rc = pre_llama3(t, w, &u, 0, u.n, 3, o);
        break;
    case PRE_QWEN2:
        rc = pre_llama3(t, w, &u, 0, u.n, 1, o);
        break;
    case PRE_DIGITS: /* \p{N} first splits the text; the GPT-2 regex runs on every piece */
        for (pos = 0, i = 0; i <= u.n && !rc; i++) {
            if (i == u.n || u.cls[i] == CAIRN__UC_NUMBER) {
                if (i > pos)
                    rc = pre_gpt2(t, w, &u, pos, i, o);
                if (!rc && i < u.n)
                    rc = emit_word(t, w, &u, i, i + 1, o);
                pos = i + 1;
            }
        }
        break;
    default:
        rc = pre_gpt2(t, w, &u, 0, u.n, o);
        break;
    }
done:
    free(u.cp);
    free(u.cls);
    free(u.off);
    return rc;
}

/* ---- encode ---------------------------------------------------------------------------- */

/* Longest special token starting at text[i..len), or -1. */
static int32_t special_at(const cairn__tok *t, const char *text, size_t i, size_t len)
{
    unsigned char b = (unsigned char)text[i];
    size_t k;
    for (k = t->special_at[b]; k < t->special_at[b + 1]; k++) {
        size_t l;
        const char *s = str_at(t, t->special[k], &l);
        if (l <= len - i && memcmp(text + i, s, l) == 0)
            return t->special[k];
    }
    return -1;
}

int cairn__tok_encode(const cairn__tok *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n)
{
    struct ids o = {NULL, 0, 0, 0};
    struct work w = {NULL, 0, {NULL, 0, 0}, NULL, 0};
    char *buf = NULL;
    size_t bufcap = 0, pos = 0, frag = 0;
    int rc = 0, prev_special = 1;

    if (ids)
        *ids = NULL;
    if (n)
        *n = 0;
    if (!t || !ids || !n || (!text && len))
        return CAIRN_EINVAL;
    if (add_special && t->add_bos && t->bos >= 0)
        push(&o, t->bos);
    /* Cut the text at special tokens (when asked); every stretch between them is ordinary text.
     * SentencePiece prefixes a space to the first stretch and to any stretch after a special. */
    while (!rc && frag <= len) {
        int32_t sp = -1;
        if (parse_special)
            for (pos = frag; pos < len && (sp = special_at(t, text, pos, len)) < 0; pos++)
                ;
        else
            pos = len;
        if (pos > frag) {
            if (t->kind == KIND_SPM)
                rc = spm_encode(t, &w, text + frag, pos - frag, t->add_space_prefix && prev_special,
                                &o, &buf, &bufcap);
            else
                rc = bpe_encode(t, &w, text + frag, pos - frag, &o);
            prev_special = 0;
        }
        if (sp < 0)
            break;
        push(&o, sp);
        prev_special = 1;
        frag = pos + (t->str_off[sp + 1] - t->str_off[sp]);
    }
    if (!rc && add_special && t->add_eos && t->eos >= 0)
        push(&o, t->eos);
    if (!rc)
        rc = o.err;
    if (!rc && !o.v) { /* promise a non-NULL array even when empty */
        o.v = malloc(sizeof *o.v);
        if (!o.v)
            rc = CAIRN_ENOMEM;
    }
    free(buf);
    free(w.s);
    free(w.h.v);
    free(w.m);
    if (rc) {
        free(o.v);
        return rc;
    }
    *ids = o.v;
    *n = o.n;
    return 0;
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
    id = find_str(t, s ? s : "", len);
    return id >= 0 && (size_t)id < t->n_vocab ? id : -1;
}
