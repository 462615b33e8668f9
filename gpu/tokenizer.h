/* gpu/tokenizer.h - text <-> token ids for GGUF models (internal to gpu/).
 *
 * Two tokenizer families, chosen by the GGUF key tokenizer.ggml.model:
 *   "llama"  SentencePiece-style BPE: pieces merged by highest score, spaces written as U+2581,
 *            a space prefix (tokenizer.ggml.add_space_prefix, default true), bytes missing from
 *            the vocabulary emitted as <0xXX> byte tokens.
 *   "gpt2"   byte-level BPE: bytes mapped to printable code points as GPT-2 does, text first split
 *            into words by the pre-tokenizer named by tokenizer.ggml.pre, then merged by rank
 *            (the order of tokenizer.ggml.merges).
 *
 * A cairn__tok is immutable after construction and copies everything it needs: it does not
 * borrow from the GGUF reader, and any number of threads may encode/decode with one at once.
 *
 * Errors are the negative CAIRN_E* codes of include/cairn_errors.h.
 */
#ifndef CAIRN_GPU_TOKENIZER_H
#define CAIRN_GPU_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn__tok cairn__tok;

/* GGUF token types (tokenizer.ggml.token_type). */
enum cairn__tok_type {
    CAIRN__TOK_UNDEFINED = 0,
    CAIRN__TOK_NORMAL = 1,
    CAIRN__TOK_UNKNOWN = 2,
    CAIRN__TOK_CONTROL = 3,
    CAIRN__TOK_USER_DEFINED = 4,
    CAIRN__TOK_UNUSED = 5,
    CAIRN__TOK_BYTE = 6,
};

/* Everything a tokenizer is built from; what cairn__tok_load reads out of GGUF metadata.
 * All arrays are read during cairn__tok_new only (copied). */
typedef struct {
    const char *model;         /* "llama" or "gpt2" (required) */
    const char *pre;           /* pre-tokenizer for gpt2 (NULL: "default"); ignored for llama */
    size_t n_vocab;            /* >= 1 */
    const char *const *tokens; /* n_vocab token texts as stored in the vocabulary */
    const size_t *token_lens;  /* byte lengths of tokens[i]; NULL: each is NUL-terminated */
    const float *scores;       /* n_vocab scores; NULL: all 0 (llama merges need them) */
    const int32_t *types;      /* n_vocab enum cairn__tok_type; NULL: all NORMAL */
    size_t n_merges;           /* gpt2: merges "left right", highest priority first */
    const char *const *merges;
    const size_t *merge_lens; /* NULL: each is NUL-terminated */
    /* Special ids, -1 for none. Ids outside [0, n_vocab) are treated as none. */
    int32_t bos, eos, unk, pad, eot, eom;
    /* -1 for the model's default: llama adds BOS, not EOS, and a space prefix; gpt2 adds none */
    int add_bos, add_eos, add_space_prefix;
    /* general.name (NULL: none); read only for the per-model rules the reference keys on it:
     * a name containing "phi-3" or "phi3" (any case) makes added tokens but <unk>, <s> and
     * <|endoftext|> take the whitespace right of them */
    const char *name;
} cairn__tok_spec;

/* Fills spec with "none"/"default" values (ids -1, flags -1, NULL arrays). */
void cairn__tok_spec_init(cairn__tok_spec *spec);

/* Builds a tokenizer from arrays (tests, or vocabularies not stored in GGUF).
 * Returns 0 and *out (free with cairn__tok_free), or CAIRN_EINVAL (NULL arguments, empty
 * vocabulary), CAIRN_EUNSUPPORTED (unknown model or pre-tokenizer name), CAIRN_EFORMAT (a merge
 * without a space, a missing merges list for gpt2), CAIRN_ENOMEM. On error *out is NULL and err
 * (if errlen > 0) holds a NUL-terminated message naming the offending item. */
int cairn__tok_new(const cairn__tok_spec *spec, cairn__tok **out, char *err, size_t errlen);

/* Builds a tokenizer from the tokenizer.ggml.* keys of an open GGUF file:
 *   model, pre, tokens, scores, token_type, merges, bos_token_id, eos_token_id,
 *   unknown_token_id, padding_token_id, eot_token_id, eom_token_id, add_bos_token,
 *   add_eos_token, add_space_prefix; and general.name (see cairn__tok_spec.name).
 * The result does not reference g (g may be closed right after). Errors as cairn__tok_new,
 * plus CAIRN_EFORMAT when a key is missing or has the wrong type or length (the message names
 * the key). */
int cairn__tok_load(const cairn__gguf *g, cairn__tok **out, char *err, size_t errlen);

void cairn__tok_free(cairn__tok *t); /* NULL is a no-op */

/* Encodes len bytes of text (any bytes; invalid UTF-8 is tokenized byte by byte, never
 * rejected). add_special: add BOS/EOS as the vocabulary asks (add_bos_token/add_eos_token).
 * Added tokens are cut out of the text first, longest first (equal lengths: lower id first),
 * as the reference (llama.cpp) does: the text of a USER_DEFINED token always becomes that token;
 * that of a CONTROL or UNKNOWN token (e.g. "<|im_end|>") only with parse_special, and is
 * otherwise tokenized as ordinary text. Tokens spelled like a turn end or a fill-in-the-middle
 * marker count as CONTROL whatever the file says (see cairn__tok_type). A byte the vocabulary
 * cannot spell at all (no piece, no byte token) becomes the unknown token, or is dropped if there
 * is none. Returns 0 with *ids (malloc'd, caller frees; non-NULL even when *n is 0) and *n, or
 * CAIRN_EINVAL / CAIRN_ENOMEM. */
int cairn__tok_encode(const cairn__tok *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n);

/* Raw bytes of one token after undoing the vocabulary's encoding: llama U+2581 -> space, gpt2
 * code points -> bytes, <0xXX> byte tokens -> that one byte; CONTROL/UNKNOWN/USER_DEFINED
 * tokens give their text verbatim. A piece may be a fragment of a UTF-8 character.
 * *bytes points into t (valid until cairn__tok_free; not NUL-terminated). 0 or CAIRN_EINVAL
 * (id out of range). */
int cairn__tok_piece(const cairn__tok *t, int32_t id, const char **bytes, size_t *len);

/* Flags for decoding. */
enum {
    CAIRN__TOK_DECODE_SPECIAL = 1, /* render CONTROL and UNKNOWN tokens' text (else they vanish) */
    CAIRN__TOK_DECODE_STRIP_SPACE = 2, /* SentencePiece rule: drop one leading space from the first
                                          piece when the tokenizer adds a space prefix */
};

/* Decodes ids into a malloc'd buffer (*out, NUL-terminated for convenience; *len excludes the
 * NUL). The bytes are the concatenated pieces: exact bytes, possibly invalid UTF-8 if the ids
 * say so. 0, CAIRN_EINVAL (an id out of range) or CAIRN_ENOMEM. */
int cairn__tok_decode(const cairn__tok *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                      size_t *len);

/* Streaming decode for generation: feed ids one at a time and get back only complete UTF-8
 * characters; the bytes of a character split across tokens are held until it is complete.
 * Bytes that can never become valid UTF-8 are passed through as they are (never dropped). */
typedef struct cairn__tok_stream cairn__tok_stream;
/* flags as for cairn__tok_decode. The stream borrows t. NULL on out of memory. */
cairn__tok_stream *cairn__tok_stream_new(const cairn__tok *t, unsigned flags);
/* Appends id's piece; *out and *len receive the bytes now ready (possibly 0 of them), valid until
 * the next call on s. 0, CAIRN_EINVAL (id out of range) or CAIRN_ENOMEM. */
int cairn__tok_stream_push(cairn__tok_stream *s, int32_t id, const char **out, size_t *len);
/* Returns whatever is still held back (an unfinished character at the end of generation). */
int cairn__tok_stream_flush(cairn__tok_stream *s, const char **out, size_t *len);
void cairn__tok_stream_free(cairn__tok_stream *s); /* NULL is a no-op */

/* Queries. */
size_t cairn__tok_n_vocab(const cairn__tok *t);
int32_t cairn__tok_bos(const cairn__tok *t); /* -1 if none */
int32_t cairn__tok_eos(const cairn__tok *t); /* -1 if none */
int32_t cairn__tok_eot(const cairn__tok *t); /* -1 if none */
int32_t cairn__tok_unk(const cairn__tok *t); /* -1 if none */
int32_t cairn__tok_pad(const cairn__tok *t); /* -1 if none */
int cairn__tok_add_bos(const cairn__tok *t); /* whether add_special adds BOS */
int cairn__tok_add_eos(const cairn__tok *t);
/* End of generation: EOS, EOT, EOM, and CONTROL tokens spelled like a turn end
 * (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, <EOT>). */
int cairn__tok_is_eog(const cairn__tok *t, int32_t id);
/* enum cairn__tok_type as the tokenizer treats it, or -1 if out of range: the file's type, except
 * that tokens spelled like a turn end or a fill-in-the-middle marker (<|im_end|>, <|fim_prefix|>,
 * <PRE>, ...) are CONTROL, as in the reference */
int cairn__tok_type(const cairn__tok *t, int32_t id);
/* Id of a token whose vocabulary text is exactly s[0..len), or -1. */
int32_t cairn__tok_find(const cairn__tok *t, const char *s, size_t len);
const char *cairn__tok_kind(const cairn__tok *t); /* "llama" or "gpt2" */
const char *cairn__tok_pre(const cairn__tok *t);  /* pre-tokenizer name as given ("default" if none;
                                                     "" for llama) */

#ifdef __cplusplus
}
#endif

#endif
