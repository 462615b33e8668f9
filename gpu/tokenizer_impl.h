/* gpu/tokenizer_impl.h - the tokenizer's inside, shared by its files (internal to gpu/):
 * tokenizer.c builds a cairn__tok from a spec (with tokenizer_special.c's tables and
 * tokenizer_decode.c's piece table), tokenizer_load.c makes the spec from GGUF metadata,
 * tokenizer_decode.c turns ids back into bytes, tokenizer_encode.c runs the merge algorithms.
 * Nothing outside the tokenizer_*.c files includes this.
 *
 * Every string the tokenizer knows is interned once, back to back in `str`: the vocabulary
 * (ids 0 .. n_vocab-1) and then any merge operand or result that is not itself a token (a
 * synthetic id >= n_vocab). `slots` is an open-addressing hash from text to id, `pairs` one from
 * an (id, id) merge pair to its rank and result, so the encoder's hot loop compares ids and
 * never builds a string. The lookups are static inline: they are that hot loop.
 */
#ifndef CAIRN_GPU_TOKENIZER_IMPL_H
#define CAIRN_GPU_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu/tokenizer.h"

/* Tokenizer family (tokenizer.ggml.model). */
enum { CAIRN__TOK_SPM = 0, CAIRN__TOK_BPE = 1 };

/* Pre-tokenizer regex of a BPE vocabulary (what tokenizer.ggml.pre names). */
enum { CAIRN__PRE_NONE, CAIRN__PRE_GPT2, CAIRN__PRE_LLAMA3, CAIRN__PRE_QWEN2, CAIRN__PRE_DIGITS };

/* One slot of the merge hash: merging string ids l and r gives string id `merged`; lower `rank`
 * (the position in tokenizer.ggml.merges) merges first. */
struct cairn__tok_pair {
    int32_t l, r; /* l == -1: empty */
    int32_t rank, merged;
};

/* An added token the encoder cuts out of the text before any merge (tokenizer_special.c). */
enum {
    CAIRN__SPECIAL_PLAIN = 1,  /* matched in plain text too (USER_DEFINED), not only when parsed */
    CAIRN__SPECIAL_RSTRIP = 2, /* the whitespace right of it goes with it */
};
struct cairn__tok_special {
    int32_t id;
    unsigned flags; /* CAIRN__SPECIAL_* */
    size_t len;     /* of its text */
};

/* A built tokenizer; immutable once cairn__tok_new returns it. */
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
    struct cairn__tok_pair *pairs; /* merge hash; pmask + 1 entries (NULL for SPM) */
    size_t pmask;
    int32_t byte_tok[256]; /* SPM: <0xXX> fallback; BPE: id of the byte's mapped character */
    unsigned char bmap[256][2], bmap_len[256]; /* BPE: UTF-8 of each byte's mapped code point */
    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;
    struct cairn__tok_special *special; /* CONTROL, USER_DEFINED, UNKNOWN: longest first */
    size_t n_special;
};

/* FNV-1a with a final mix; the string hash. */
static inline uint64_t cairn__tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* Text of string id (token or synthetic) and its length. */
static inline const char *cairn__tok_str(const cairn__tok *t, int32_t id, size_t *len)
{
    *len = t->str_off[id + 1] - t->str_off[id];
    return t->str + t->str_off[id];
}

/* Id of the interned string s[0..len), or -1. */
static inline int32_t cairn__tok_find_str(const cairn__tok *t, const char *s, size_t len)
{
    size_t i = (size_t)cairn__tok_hash(s, len) & t->hmask;
    for (;; i = (i + 1) & t->hmask) {
        int32_t id = t->slots[i];
        size_t l;
        const char *p;
        if (id < 0)
            return -1;
        p = cairn__tok_str(t, id, &l);
        if (l == len && memcmp(p, s, len) == 0)
            return id;
    }
}

/* Hash of a merge pair: the two ids packed in 64 bits, then a murmur-style mix. */
static inline size_t cairn__tok_pair_hash(int32_t l, int32_t r)
{
    uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

/* The merge of string ids l and r, or NULL if they do not merge (or either is -1). */
static inline const struct cairn__tok_pair *cairn__tok_find_pair(const cairn__tok *t, int32_t l,
                                                                 int32_t r)
{
    size_t i;
    if (l < 0 || r < 0)
        return NULL;
    for (i = cairn__tok_pair_hash(l, r) & t->pmask;; i = (i + 1) & t->pmask) {
        const struct cairn__tok_pair *p = &t->pairs[i];
        if (p->l < 0)
            return NULL;
        if (p->l == l && p->r == r)
            return p;
    }
}

/* ---- shared between the tokenizer's files ----------------------------------------------- */

/* The (err, errlen) message convention of gpu/ without a return code: formats into err when err
 * && errlen (always NUL-terminated, truncated to fit). */
void cairn__tok_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* GPT-2's bytes_to_unicode: the code point that stands for byte b in a byte-level BPE
 * vocabulary. */
uint32_t cairn__tok_gpt2_byte_cp(unsigned b);
/* Builders run by tokenizer.c once the vocabulary is interned, in this order; each returns 0 or
 * CAIRN_ENOMEM. */
void cairn__tok_fix_types(cairn__tok *t);   /* tokenizer_special.c: control-looking -> CONTROL */
void cairn__tok_mark_eog(cairn__tok *t);    /* tokenizer_special.c: eog (needs ids and types) */
int cairn__tok_build_pieces(cairn__tok *t); /* tokenizer_decode.c: piece, piece_off */
/* tokenizer_special.c: special, n_special; name is general.name (NULL: none) */
int cairn__tok_build_specials(cairn__tok *t, const char *name);

#endif
