/* gpu/tokenizer_load.c - a tokenizer from the tokenizer.ggml.* keys of a GGUF file.
 *
 * Loading only translates: it reads the keys into a cairn__tok_spec, borrowing strings from the
 * mapping for the moment it takes cairn__tok_new to copy them, and leaves every decision about
 * the vocabulary to the builder (tokenizer.c), general.name included (tokenizer_special.c keys a
 * model's whitespace rule on it, as the reference does). What it does check is the shape of each
 * key (its type, that per-token arrays have one entry per token), so that a bad file is reported by
 * key name rather than as a confusing failure later. Missing optional keys become the spec's
 * "default" values, except that SentencePiece vocabularies without special-id keys get the
 * classic SentencePiece ids (BOS 1, EOS 2, UNK 0).
 */
#include "gpu/tokenizer.h"
#include "gpu/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "cairn_errors.h"

/* ---- loading from GGUF ----------------------------------------------------------------- */

/* A special token id. strict (BOS, EOS, UNK): an id outside the vocabulary is an error, since
 * dropping it would silently change every prompt (no BOS) or never end a generation (no EOS).
 * Otherwise such an id means "none", as files in the wild use e.g. a padding id past the end. */
static int gguf_id(const cairn__gguf *g, const char *key, size_t n_vocab, int strict, int32_t *out,
                   char *err, size_t errlen)
{
    int64_t v;
    int rc = cairn__gguf_get_i64(g, key, &v);
    *out = -1;
    if (rc == CAIRN_ENOTFOUND)
        return 0;
    if (rc) {
        cairn__tok_set_err(err, errlen, "%s: not an integer", key);
        return CAIRN_EFORMAT;
    }
    if (v >= 0 && (uint64_t)v < n_vocab && v <= INT32_MAX) {
        *out = (int32_t)v;
        return 0;
    }
    if (strict) {
        cairn__tok_set_err(err, errlen, "%s: id %lld is outside the vocabulary of %zu tokens", key,
                           (long long)v, n_vocab);
        return CAIRN_EFORMAT;
    }
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
        cairn__tok_set_err(err, errlen, "%s: not a boolean", key);
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
        cairn__tok_set_err(err, errlen, "%s: not an array of strings", key);
        return CAIRN_EFORMAT;
    }
    if (cnt > (uint64_t)INT32_MAX / 4) {
        cairn__tok_set_err(err, errlen, "%s: too many entries (%llu)", key,
                           (unsigned long long)cnt);
        return CAIRN_EFORMAT;
    }
    *v = malloc((cnt ? cnt : 1) * sizeof **v);
    *lens = malloc((cnt ? cnt : 1) * sizeof **lens);
    if (!*v || !*lens)
        return CAIRN_ENOMEM;
    for (i = 0; i < cnt; i++) {
        if (cairn__gguf_arr_str(g, key, i, &(*v)[i], &(*lens)[i])) {
            cairn__tok_set_err(err, errlen, "%s[%llu]: unreadable string", key,
                               (unsigned long long)i);
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
    char model[64], pre[64], *name = NULL;
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
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.model: %s",
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
            cairn__tok_set_err(err, errlen, "tokenizer.ggml.pre: not a valid name");
            return CAIRN_EFORMAT;
        }
        memcpy(pre, s, slen);
        pre[slen] = 0;
        sp.pre = pre;
    } else if (rc != CAIRN_ENOTFOUND) {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.pre: not a string");
        return CAIRN_EFORMAT;
    }

    rc = cairn__gguf_get_str(g, "general.name", &s, &slen);
    if (rc == 0) {
        if (!(name = malloc(slen + 1))) {
            rc = CAIRN_ENOMEM;
            goto done;
        }
        memcpy(name, s, slen);
        name[slen] = 0; /* a NUL inside only shortens it: the name is matched, never printed */
        sp.name = name;
    } else if (rc != CAIRN_ENOTFOUND) {
        cairn__tok_set_err(err, errlen, "general.name: not a string");
        return CAIRN_EFORMAT;
    }

    rc = gguf_strarr(g, "tokenizer.ggml.tokens", &tokens, &tok_lens, &n_tok, err, errlen);
    if (rc == CAIRN_ENOTFOUND || (rc == 0 && n_tok == 0)) {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.tokens: missing or empty");
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
            cairn__tok_set_err(err, errlen, "tokenizer.ggml.scores: %llu entries for %zu tokens",
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
                cairn__tok_set_err(err, errlen, "tokenizer.ggml.scores[%llu]: not a number",
                                   (unsigned long long)i);
                rc = CAIRN_EFORMAT;
                goto done;
            }
        sp.scores = scores;
    } else if (rc != CAIRN_ENOTFOUND) {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.scores: not an array");
        rc = CAIRN_EFORMAT;
        goto done;
    }

    rc = cairn__gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &cnt);
    if (rc == 0) {
        if (cnt != n_tok) {
            cairn__tok_set_err(err, errlen,
                               "tokenizer.ggml.token_type: %llu entries for %zu tokens",
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
                cairn__tok_set_err(err, errlen,
                                   "tokenizer.ggml.token_type[%llu]: not a token type (0..6)",
                                   (unsigned long long)i);
                rc = CAIRN_EFORMAT;
                goto done;
            }
            types[i] = (int32_t)v;
        }
        sp.types = types;
    } else if (rc != CAIRN_ENOTFOUND) {
        cairn__tok_set_err(err, errlen, "tokenizer.ggml.token_type: not an array");
        rc = CAIRN_EFORMAT;
        goto done;
    }

    rc = gguf_strarr(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merges, err, errlen);
    if (rc && rc != CAIRN_ENOTFOUND)
        goto done;
    sp.merges = merges;
    sp.merge_lens = merge_lens;
    sp.n_merges = n_merges;

    if ((rc = gguf_id(g, "tokenizer.ggml.bos_token_id", n_tok, 1, &sp.bos, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eos_token_id", n_tok, 1, &sp.eos, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.unknown_token_id", n_tok, 1, &sp.unk, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.padding_token_id", n_tok, 0, &sp.pad, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eot_token_id", n_tok, 0, &sp.eot, err, errlen)) ||
        (rc = gguf_id(g, "tokenizer.ggml.eom_token_id", n_tok, 0, &sp.eom, err, errlen)) ||
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
        cairn__tok_set_err(err, errlen, "tokenizer: out of memory");
    free(tokens);
    free(tok_lens);
    free(merges);
    free(merge_lens);
    free(scores);
    free(types);
    free(name);
    return rc;
}
