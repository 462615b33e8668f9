/* gpu/gguf_types.c - what the numbers in a GGUF file mean: tensor types and value types.
 *
 * Two tables drive everything the reader knows about types. ggml_type_names names every tensor
 * type ggml has ever assigned, so that an unsupported one is reported by name; type_blocks lists
 * the block layouts of the few this engine computes with, and is the single place that decides
 * whether a tensor type is supported. Value types (the metadata's u8 .. f64, string, array) get
 * their names, encoded sizes, and one integer decoder that serves every width and sign, so the
 * getters can convert between integer types by value rather than by declared type.
 */
#include "gpu/gguf.h"
#include "gpu/gguf_impl.h"

/* ---- ggml types ---------------------------------------------------------------------------- */

/* Every type number ggml has assigned, for error messages; only some are supported. */
static const char *const ggml_type_names[] = {
    [0] = "F32",     [1] = "F16",         [2] = "Q4_0",        [3] = "Q4_1",        [4] = "Q4_2",
    [5] = "Q4_3",    [6] = "Q5_0",        [7] = "Q5_1",        [8] = "Q8_0",        [9] = "Q8_1",
    [10] = "Q2_K",   [11] = "Q3_K",       [12] = "Q4_K",       [13] = "Q5_K",       [14] = "Q6_K",
    [15] = "Q8_K",   [16] = "IQ2_XXS",    [17] = "IQ2_XS",     [18] = "IQ3_XXS",    [19] = "IQ1_S",
    [20] = "IQ4_NL", [21] = "IQ3_S",      [22] = "IQ2_S",      [23] = "IQ4_XS",     [24] = "I8",
    [25] = "I16",    [26] = "I32",        [27] = "I64",        [28] = "F64",        [29] = "IQ1_M",
    [30] = "BF16",   [31] = "Q4_0_4_4",   [32] = "Q4_0_4_8",   [33] = "Q4_0_8_8",   [34] = "TQ1_0",
    [35] = "TQ2_0",  [36] = "IQ4_NL_4_4", [37] = "IQ4_NL_4_8", [38] = "IQ4_NL_8_8", [39] = "MXFP4",
};

const char *cairn__ggml_type_name(uint32_t type)
{
    if (type < sizeof ggml_type_names / sizeof ggml_type_names[0] && ggml_type_names[type])
        return ggml_type_names[type];
    return "?";
}

/* Elements and bytes per block of the supported types (the ggml block layouts). */
static const struct {
    uint32_t type;
    uint32_t elems, bytes;
} type_blocks[] = {
    {CAIRN__GGML_F32, 1, 4},      {CAIRN__GGML_F16, 1, 2},      {CAIRN__GGML_BF16, 1, 2},
    {CAIRN__GGML_Q8_0, 32, 34},   {CAIRN__GGML_Q4_0, 32, 18},   {CAIRN__GGML_Q4_1, 32, 20},
    {CAIRN__GGML_Q5_0, 32, 22},   {CAIRN__GGML_Q5_1, 32, 24},   {CAIRN__GGML_Q2_K, 256, 84},
    {CAIRN__GGML_Q3_K, 256, 110}, {CAIRN__GGML_Q4_K, 256, 144}, {CAIRN__GGML_Q5_K, 256, 176},
    {CAIRN__GGML_Q6_K, 256, 210}, {CAIRN__GGML_IQ4_NL, 32, 18}, {CAIRN__GGML_IQ4_XS, 256, 136},
};

int cairn__ggml_type_block(uint32_t type, uint64_t *elems, uint64_t *bytes)
{
    for (size_t i = 0; i < sizeof type_blocks / sizeof type_blocks[0]; i++)
        if (type_blocks[i].type == type) {
            *elems = type_blocks[i].elems;
            *bytes = type_blocks[i].bytes;
            return 1;
        }
    return 0;
}

uint64_t cairn__ggml_block_size(uint32_t type)
{
    uint64_t e, b;
    return cairn__ggml_type_block(type, &e, &b) ? e : 0;
}

uint64_t cairn__ggml_row_size(uint32_t type, uint64_t n)
{
    uint64_t e, b, r;
    if (!cairn__ggml_type_block(type, &e, &b) || n % e)
        return 0;
    if (__builtin_mul_overflow(n / e, b, &r))
        return 0;
    return r;
}

static const char *const vtype_names[GGUF_NVTYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *cairn__gguf_vtype_name(int vtype)
{
    return vtype >= 0 && vtype < GGUF_NVTYPES ? vtype_names[vtype] : "?";
}

/* Encoded size of a scalar value type; 0 for string and array (variable). */
unsigned cairn__gguf_vtype_size(uint32_t t)
{
    static const unsigned sz[GGUF_NVTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_NVTYPES ? sz[t] : 0;
}

int cairn__gguf_is_int_vtype(uint32_t t)
{
    return t <= CAIRN__GGUF_I32 || t == CAIRN__GGUF_U64 || t == CAIRN__GGUF_I64;
}

/* Decodes an integer value of any width; *neg set for negative signed values. */
void cairn__gguf_read_int(uint32_t t, const uint8_t *p, uint64_t *mag, int *neg)
{
    int64_t s = 0;
    *neg = 0;
    switch (t) {
    case CAIRN__GGUF_U8:
        *mag = p[0];
        return;
    case CAIRN__GGUF_U16:
        *mag = le16(p);
        return;
    case CAIRN__GGUF_U32:
        *mag = le32(p);
        return;
    case CAIRN__GGUF_U64:
        *mag = le64(p);
        return;
    case CAIRN__GGUF_I8:
        s = (int8_t)p[0];
        break;
    case CAIRN__GGUF_I16:
        s = (int16_t)le16(p);
        break;
    case CAIRN__GGUF_I32:
        s = (int32_t)le32(p);
        break;
    case CAIRN__GGUF_I64:
        s = (int64_t)le64(p);
        break;
    default:
        *mag = 0;
        return;
    }
    if (s < 0) {
        *neg = 1;
        *mag = (uint64_t)0 - (uint64_t)s; /* magnitude, defined even for INT64_MIN */
    } else {
        *mag = (uint64_t)s;
    }
}
