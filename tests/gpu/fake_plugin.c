/* tests/gpu/fake_plugin.c - stand-ins for libcairn-cuda.so, for the loader's tests (test_plugin.c).
 *
 * Built four times (FAKE_MODE): 0 a well-formed module whose backend reports no device, 1 one
 * that speaks another ABI, 2 one built against "other headers" (its layout fingerprint is off by
 * one), 3 a shared object without the entry point. None needs CUDA, so the loader's every path
 * is tested on any machine. The good one's create() and bandwidth() call back into the program
 * through the host table (errf, dequant_row), to show the lent functions arrive intact.
 */
#include <stdio.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"

#include "cairn_errors.h"
#if FAKE_MODE != 3

static cairn__cuda_host host;

static int fake_create(const cairn__model *m, const cairn__backend_opts *o, cairn__backend **out,
                       char *err, size_t errlen)
{
    (void)m, (void)o;
    *out = NULL;
    return host.errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: %s module", "fake");
}

static int fake_forward(cairn__backend *b, const int32_t *tokens, int n, int pos, float *logits,
                        int all_logits)
{
    (void)b, (void)tokens, (void)n, (void)pos, (void)logits, (void)all_logits;
    return CAIRN_ECUDA;
}

static void fake_destroy(cairn__backend *b) { (void)b; }

static const cairn__backend_ops fake_ops = {
    .name = "cuda", .create = fake_create, .forward = fake_forward, .destroy = fake_destroy};

/* "bandwidth": the program's dequant_row applied to the F16 value 1.5 (0x3E00), times 1e9 */
static int fake_bandwidth(int device, double *bytes_per_s, char *name, size_t name_len, char *err,
                          size_t errlen)
{
    (void)device, (void)err, (void)errlen;
    const uint16_t h = 0x3E00;
    float f = 0.0f;
    host.dequant_row(CAIRN__GGML_F16, &h, &f, 1);
    *bytes_per_s = (double)f * 1e9;
    if (name && name_len)
        snprintf(name, name_len, "fake device");
    return 0;
}

static uint64_t fake_weight_bytes(const cairn__backend *b)
{
    (void)b;
    return 42;
}

static const char *fake_dtype(const cairn__backend *b)
{
    (void)b;
    return "f16";
}

static const char *fake_graph_status(const cairn__backend *b)
{
    (void)b;
    return "graph";
}

__attribute__((visibility("default"))) cairn__cuda_plugin_fn cairn_cuda_plugin;

const cairn__cuda_plugin *cairn_cuda_plugin(uint32_t abi, const cairn__cuda_host *h)
{
    static cairn__cuda_plugin table;
    table.abi = FAKE_MODE == 1 ? 999u : CAIRN__CUDA_PLUGIN_ABI;
    table.layout = cairn__cuda_plugin_layout() + (FAKE_MODE == 2 ? 1u : 0u);
    if (abi != table.abi || !h || h->layout != table.layout)
        return &table;
    host = *h;
    table.ops = &fake_ops;
    table.bandwidth = fake_bandwidth;
    table.weight_bytes = fake_weight_bytes;
    table.dtype = fake_dtype;
    table.graph_status = fake_graph_status;
    return &table;
}

#else

__attribute__((visibility("default"))) int cairn_not_a_plugin(void);
int cairn_not_a_plugin(void) { return 0; }

#endif
