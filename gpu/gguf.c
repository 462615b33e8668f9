/* gpu/gguf.c - the GGUF reader's lookups: accessors, metadata getters, tensor lookup.
 *
 * Everything here runs after gguf_open.c has validated the whole file, so nothing is bounds-checked
 * twice: a key or tensor name is one hash probe (gguf_impl.h), and a value is decoded straight from
 * the mapping on each call rather than copied at open. Getters convert by value, not by declared
 * type: a u8, i32 or u64 key all read as the u32 the caller asks for when the value fits, since
 * the integer width of a key is the choice of whoever wrote the file.
 */
#include "gpu/gguf.h"
#include "gpu/gguf_impl.h"

#include "cairn_errors.h"

/* ---- accessors ----------------------------------------------------------------------------- */

uint32_t cairn__gguf_version(const cairn__gguf *g) { return g ? g->version : 0; }
uint64_t cairn__gguf_file_size(const cairn__gguf *g) { return g ? g->size : 0; }
uint32_t cairn__gguf_alignment(const cairn__gguf *g) { return g ? g->alignment : 0; }
uint64_t cairn__gguf_data_offset(const cairn__gguf *g) { return g ? g->data_off : 0; }
size_t cairn__gguf_n_tensors(const cairn__gguf *g) { return g ? g->n_tensors : 0; }
size_t cairn__gguf_n_kv(const cairn__gguf *g) { return g ? g->n_kv : 0; }

const cairn__gguf_tensor *cairn__gguf_tensor_at(const cairn__gguf *g, size_t i)
{
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const cairn__gguf_tensor *cairn__gguf_tensor_find(const cairn__gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    size_t i = htab_lookup(g, &g->tensor_h, tensor_name, name, SIZE_MAX);
    return i == SIZE_MAX ? NULL : &g->tensors[i];
}

const char *cairn__gguf_kv_key(const cairn__gguf *g, size_t i)
{
    return g && i < g->n_kv ? g->kv[i].key : NULL;
}

static const struct kv *find_kv(const cairn__gguf *g, const char *key)
{
    if (!g || !key)
        return NULL;
    size_t i = htab_lookup(g, &g->kv_h, kv_name, key, SIZE_MAX);
    return i == SIZE_MAX ? NULL : &g->kv[i];
}

int cairn__gguf_kv_type(const cairn__gguf *g, const char *key)
{
    const struct kv *kv = find_kv(g, key);
    return kv ? (int)kv->type : CAIRN_ENOTFOUND;
}

/* Integer value of a scalar KV, or CAIRN_ENOTFOUND / CAIRN_EFORMAT. */
static int get_int(const cairn__gguf *g, const char *key, uint64_t *mag, int *neg)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (!cairn__gguf_is_int_vtype(kv->type))
        return CAIRN_EFORMAT;
    cairn__gguf_read_int(kv->type, kv->val, mag, neg);
    return 0;
}

int cairn__gguf_get_u32(const cairn__gguf *g, const char *key, uint32_t *out)
{
    uint64_t m;
    int neg, rc = get_int(g, key, &m, &neg);
    if (rc)
        return rc;
    if (neg || m > UINT32_MAX)
        return CAIRN_EFORMAT;
    if (out)
        *out = (uint32_t)m;
    return 0;
}

int cairn__gguf_get_u64(const cairn__gguf *g, const char *key, uint64_t *out)
{
    uint64_t m;
    int neg, rc = get_int(g, key, &m, &neg);
    if (rc)
        return rc;
    if (neg)
        return CAIRN_EFORMAT;
    if (out)
        *out = m;
    return 0;
}

/* Magnitude and sign to int64, if it fits. */
static int to_i64(uint64_t m, int neg, int64_t *out)
{
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1)
            return CAIRN_EFORMAT;
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > INT64_MAX)
            return CAIRN_EFORMAT;
        *out = (int64_t)m;
    }
    return 0;
}

int cairn__gguf_get_i64(const cairn__gguf *g, const char *key, int64_t *out)
{
    uint64_t m;
    int64_t v;
    int neg, rc = get_int(g, key, &m, &neg);
    if (rc || (rc = to_i64(m, neg, &v)))
        return rc;
    if (out)
        *out = v;
    return 0;
}

/* Any numeric value as float (f64 narrowed, integers converted). */
static int num_to_f32(uint32_t t, const uint8_t *p, float *out)
{
    if (t == CAIRN__GGUF_F32) {
        *out = lef32(p);
    } else if (t == CAIRN__GGUF_F64) {
        *out = (float)lef64(p);
    } else if (cairn__gguf_is_int_vtype(t)) {
        uint64_t m;
        int neg;
        cairn__gguf_read_int(t, p, &m, &neg);
        *out = neg ? -(float)m : (float)m;
    } else {
        return CAIRN_EFORMAT;
    }
    return 0;
}

int cairn__gguf_get_f32(const cairn__gguf *g, const char *key, float *out)
{
    const struct kv *kv = find_kv(g, key);
    float v;
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (num_to_f32(kv->type, kv->val, &v))
        return CAIRN_EFORMAT;
    if (out)
        *out = v;
    return 0;
}

int cairn__gguf_get_bool(const cairn__gguf *g, const char *key, int *out)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (kv->type != CAIRN__GGUF_BOOL)
        return CAIRN_EFORMAT;
    if (out)
        *out = kv->val[0] != 0;
    return 0;
}

int cairn__gguf_get_str(const cairn__gguf *g, const char *key, const char **s, size_t *len)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (kv->type != CAIRN__GGUF_STRING)
        return CAIRN_EFORMAT;
    if (s)
        *s = (const char *)kv->val;
    if (len)
        *len = (size_t)kv->n;
    return 0;
}

int cairn__gguf_get_arr(const cairn__gguf *g, const char *key, int *elem_type, uint64_t *n)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (kv->type != CAIRN__GGUF_ARRAY)
        return CAIRN_EFORMAT;
    if (elem_type)
        *elem_type = (int)kv->elem_type;
    if (n)
        *n = kv->n;
    return 0;
}

/* The array KV for key and a bounds check of i. */
static int arr_elem(const cairn__gguf *g, const char *key, uint64_t i, const struct kv **out)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv)
        return CAIRN_ENOTFOUND;
    if (kv->type != CAIRN__GGUF_ARRAY)
        return CAIRN_EFORMAT;
    if (i >= kv->n)
        return CAIRN_EINVAL;
    *out = kv;
    return 0;
}

int cairn__gguf_arr_str(const cairn__gguf *g, const char *key, uint64_t i, const char **s,
                        size_t *len)
{
    const struct kv *kv = NULL;
    int rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    if (kv->elem_type != CAIRN__GGUF_STRING)
        return CAIRN_EFORMAT;
    const uint8_t *p = g->base + kv->str_off[i];
    if (s)
        *s = (const char *)p + 8;
    if (len)
        *len = (size_t)le64(p);
    return 0;
}

int cairn__gguf_arr_f32(const cairn__gguf *g, const char *key, uint64_t i, float *out)
{
    const struct kv *kv = NULL;
    float v;
    int rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    if (num_to_f32(kv->elem_type, kv->val + i * cairn__gguf_vtype_size(kv->elem_type), &v))
        return CAIRN_EFORMAT;
    if (out)
        *out = v;
    return 0;
}

int cairn__gguf_arr_i64(const cairn__gguf *g, const char *key, uint64_t i, int64_t *out)
{
    const struct kv *kv = NULL;
    uint64_t m;
    int64_t v;
    int neg, rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    if (!cairn__gguf_is_int_vtype(kv->elem_type))
        return CAIRN_EFORMAT;
    cairn__gguf_read_int(kv->elem_type, kv->val + i * cairn__gguf_vtype_size(kv->elem_type), &m,
                         &neg);
    if ((rc = to_i64(m, neg, &v)))
        return rc;
    if (out)
        *out = v;
    return 0;
}

const void *cairn__gguf_arr_data(const cairn__gguf *g, const char *key)
{
    const struct kv *kv = find_kv(g, key);
    if (!kv || kv->type != CAIRN__GGUF_ARRAY || kv->elem_type == CAIRN__GGUF_STRING)
        return NULL;
    return kv->val;
}
