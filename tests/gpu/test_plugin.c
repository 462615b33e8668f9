/* tests/gpu/test_plugin.c - loading the CUDA backend module at run time (suite unit, no GPU).
 *
 * What is checked: a program linked with the engine maps no CUDA library until a "cuda" or
 * "auto" backend is asked for (`cairn --help` included, through LD_DEBUG=libs); every way a module
 * can be wrong gives the documented code with the loader's text (missing file, not a shared
 * object, no entry point: CAIRN_ENODEVICE; another ABI or other headers: CAIRN_EUNSUPPORTED); a
 * good module's functions are reached and reach back into the program (the fake modules of
 * fake_plugin.c, whose paths come as arguments: good, abi, layout, noentry); backend selection
 * through the process-wide module ("cuda" reports the module's error, "auto" falls back to the
 * CPU silently); and `cairn generate` maps all of it to exit 69 with a clear message, while with
 * the real module (when this build has one) it either runs on the GPU or says "no CUDA device".
 */
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/gguf.h"
#include "gpu/model.h"
#include "tests/model/mkmodel.h"
#include "tests/tap.h"
#include "tests/testutil.h"

#include "cairn_errors.h"
static int cuda_mapped_cb(struct dl_phdr_info *info, size_t size, void *user)
{
    (void)size;
    const char *n = info->dlpi_name ? info->dlpi_name : "";
    if (strstr(n, "libcudart") || strstr(n, "libcublas") || strstr(n, "libcairn-cuda")) {
        snprintf(user, 256, "%s", n);
        return 1;
    }
    return 0;
}

/* the path of a CUDA library mapped into this process, or "" */
static const char *cuda_mapped(void)
{
    static char which[256];
    which[0] = '\0';
    dl_iterate_phdr(cuda_mapped_cb, which);
    return which;
}

/* runs bin with args and extra environment (NULL-terminated lists); its stderr is in r->err */
static int run(tu_result *r, const char *const *argv, const char *const *env)
{
    return tu_run(r, argv, env, NULL, 0, 60000);
}

static void check_open(const char *good, const char *abi, const char *layout, const char *noentry,
                       const char *text)
{
    const cairn__cuda_plugin *p = (const cairn__cuda_plugin *)1;
    char err[512] = "";
    int rc = cairn__cuda_plugin_open("/nonexistent/libcairn-cuda.so", &p, err, sizeof err);
    ok(rc == CAIRN_ENODEVICE && p == NULL && strstr(err, "/nonexistent/libcairn-cuda.so") &&
           strstr(err, "No such file"),
       "missing module -> ENODEVICE with dlerror's text (%s)", err);
    rc = cairn__cuda_plugin_open(text, &p, err, sizeof err);
    ok(rc == CAIRN_ENODEVICE && p == NULL && strstr(err, text), "a text file -> ENODEVICE (%s)",
       err);
    rc = cairn__cuda_plugin_open(noentry, &p, err, sizeof err);
    ok(rc == CAIRN_ENODEVICE && p == NULL && strstr(err, "not a cairn CUDA backend module"),
       "a shared object without the entry point -> ENODEVICE (%s)", err);
    rc = cairn__cuda_plugin_open(abi, &p, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && p == NULL && strstr(err, "ABI 999"),
       "module of another ABI -> EUNSUPPORTED (%s)", err);
    rc = cairn__cuda_plugin_open(layout, &p, err, sizeof err);
    ok(rc == CAIRN_EUNSUPPORTED && p == NULL && strstr(err, "other headers"),
       "module built against other headers -> EUNSUPPORTED (%s)", err);
    rc = cairn__cuda_plugin_open("", &p, err, sizeof err);
    ok(rc == CAIRN_ENODEVICE && p == NULL, "empty path -> ENODEVICE (%s)", err);
    rc = cairn__cuda_plugin_open(good, &p, err, sizeof err);
    if (!ok(rc == 0 && p && p->abi == CAIRN__CUDA_PLUGIN_ABI && p->ops &&
                strcmp(p->ops->name, "cuda") == 0,
            "good module loads: its table, its \"cuda\" operations (%s)", rc ? err : "ok"))
        return;
    double bw = 0;
    char name[64] = "";
    rc = p->bandwidth(0, &bw, name, sizeof name, err, sizeof err);
    ok(rc == 0 && bw == 1.5e9 && strcmp(name, "fake device") == 0,
       "the module's functions run and call back into the program (dequant_row: %g, %s)", bw, name);
    ok(p->weight_bytes(NULL) == 42 && strcmp(p->dtype(NULL), "f16") == 0 &&
           strcmp(p->graph_status(NULL), "graph") == 0,
       "diagnostics reached through the table");
    const cairn__cuda_plugin *again = NULL;
    rc = cairn__cuda_plugin_open(good, &again, err, sizeof err);
    ok(rc == 0 && again == p, "opening it again gives the same module");
}

/* backend selection through the process's module, which CAIRN_CUDA_PLUGIN points at the fake */
static void check_select(const char *good)
{
    setenv("CAIRN_CUDA_PLUGIN", good, 1);
    mk_spec s;
    mk_spec_default(&s);
    unsigned char *buf = NULL;
    size_t len = 0;
    cairn__gguf *g = NULL;
    cairn__model *m = NULL;
    char err[512] = "";
    int rc =
        mk_model(&s, &buf, &len) == 0 ? cairn__gguf_open_mem(buf, len, &g, err, sizeof err) : -1000;
    if (rc == 0)
        rc = cairn__model_load(g, &m, err, sizeof err);
    if (!ok(rc == 0, "probe model (%s)", rc ? err : "ok"))
        goto out;
    cairn__backend *b = NULL;
    cairn__backend_opts o = {.n_ctx = 8, .n_threads = 1};
    rc = cairn__backend_new("cuda", m, &o, &b, err, sizeof err);
#ifdef CAIRN_HAVE_CUDA
    ok(rc == CAIRN_ENODEVICE && b == NULL && strstr(err, "no CUDA device: fake module"),
       "\"cuda\" goes through the module named by CAIRN_CUDA_PLUGIN (%s)", err);
    const cairn__cuda_plugin *p1 = NULL, *p2 = NULL;
    int r1 = cairn__cuda_plugin_load(&p1, err, sizeof err),
        r2 = cairn__cuda_plugin_load(&p2, NULL, 0);
    ok(r1 == 0 && r2 == 0 && p1 && p1 == p2 && strcmp(p1->dtype(NULL), "f16") == 0,
       "the process's module is loaded once and kept");
#else
    ok(rc == CAIRN_EUNSUPPORTED && b == NULL && strstr(err, "no CUDA backend"),
       "\"cuda\" in a build without CUDA -> EUNSUPPORTED (%s)", err);
    const cairn__cuda_plugin *p1 = (const cairn__cuda_plugin *)1;
    ok(cairn__cuda_plugin_load(&p1, NULL, 0) == CAIRN_EUNSUPPORTED && p1 == NULL,
       "no module to load in a build without CUDA");
#endif
    strcpy(err, "untouched");
    rc = cairn__backend_new("auto", m, &o, &b, err, sizeof err);
    ok(rc == 0 && b && strcmp(cairn__backend_name(b), "cpu") == 0 && err[0] == '\0',
       "\"auto\" falls back to the cpu silently (%s, err '%s')",
       b ? cairn__backend_name(b) : "none", err);
    cairn__backend_free(b);
out:
    cairn__model_free(m);
    cairn__gguf_close(g);
    free(buf);
    unsetenv("CAIRN_CUDA_PLUGIN");
}

/* `cairn` itself: no CUDA at start-up, exit 69 and a message for every module failure. Each
 * child gets CAIRN_CUDA_PLUGIN only from env_extra (check_select unset it here). */
static void check_cli(const char *bin, const char *good, const char *abi, const char *dir)
{
    char model[512];
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    mk_spec s;
    mk_spec_default(&s);
    s.tokenizer = 1;
    unsigned char *buf = NULL;
    size_t len = 0;
    int wrote = mk_model(&s, &buf, &len) == 0 && tu_write_file(model, buf, len) == 0;
    free(buf);
    if (!ok(wrote, "model file written"))
        return;
    tu_result r;
    const char *ld_debug[] = {"LD_DEBUG=libs", NULL};

    const char *help[] = {bin, "--help", NULL};
    int rc = run(&r, help, ld_debug);
    ok(rc == 0 && strstr(r.err, "calling init") && !strstr(r.err, "libcudart") &&
           !strstr(r.err, "libcublas") && !strstr(r.err, "libcairn-cuda"),
       "cairn --help loads no CUDA library (LD_DEBUG=libs)");
    tu_result_free(&r);
    const char *gen_cpu[] = {bin, "generate",  "-m",  model, "-p", "hi", "--max-tokens",
                             "2", "--backend", "cpu", NULL};
    rc = run(&r, gen_cpu, ld_debug);
    ok(rc == 0 && !strstr(r.err, "libcudart") && !strstr(r.err, "libcairn-cuda"),
       "cairn generate --backend cpu loads no CUDA library (%d)", rc);
    tu_result_free(&r);

    const char *gen_cuda[] = {bin, "generate",  "-m",   model, "-p", "hi", "--max-tokens",
                              "2", "--backend", "cuda", NULL};
    const char *gen_auto[] = {bin, "generate",  "-m",   model, "-p", "hi", "--max-tokens",
                              "2", "--backend", "auto", NULL};
#ifdef CAIRN_HAVE_CUDA
    const char *missing[] = {"CAIRN_CUDA_PLUGIN=/nonexistent/libcairn-cuda.so", NULL};
    rc = run(&r, gen_cuda, missing);
    ok(rc == 69 && strstr(r.err, "cannot load the CUDA backend module") &&
           strstr(r.err, "CAIRN_CUDA_PLUGIN"),
       "generate --backend cuda, module missing -> exit 69 (%d: %s)", rc, r.err);
    tu_result_free(&r);
    rc = run(&r, gen_auto, missing);
    ok(rc == 0 && strstr(r.err, "cpu backend") && !strstr(r.err, "cairn generate:"),
       "generate --backend auto, module missing -> cpu, silently (%d: %s)", rc, r.err);
    tu_result_free(&r);
    char abi_env[600], good_env[600];
    snprintf(abi_env, sizeof abi_env, "CAIRN_CUDA_PLUGIN=%s", abi);
    snprintf(good_env, sizeof good_env, "CAIRN_CUDA_PLUGIN=%s", good);
    const char *abi_e[] = {abi_env, NULL}, *good_e[] = {good_env, NULL};
    rc = run(&r, gen_cuda, abi_e);
    ok(rc == 69 && strstr(r.err, "ABI 999"),
       "generate --backend cuda, module of another ABI -> exit 69 (%d: %s)", rc, r.err);
    tu_result_free(&r);
    rc = run(&r, gen_cuda, good_e);
    ok(rc == 69 && strstr(r.err, "no CUDA device: fake module"),
       "generate --backend cuda, module without a device -> exit 69 (%d: %s)", rc, r.err);
    tu_result_free(&r);
    /* the real module, found in the build tree: on a GPU it runs, elsewhere it says why not */
    rc = run(&r, gen_cuda, ld_debug);
    const int loaded = strstr(r.err, "libcairn-cuda.so") != NULL;
    char *msg = strstr(r.err, "cairn generate:"); /* its own line, among the loader's debug lines */
    if (msg && strchr(msg, '\n'))
        *strchr(msg, '\n') = '\0';
    if (rc == 0)
        ok(loaded && strstr(r.err, "cuda backend"),
           "generate --backend cuda runs on the GPU through the module");
    else
        ok(rc == 69 && loaded && msg && strstr(msg, "no CUDA device"),
           "generate --backend cuda without a GPU: module loaded, then exit 69 'no CUDA device' "
           "(%d: %s)",
           rc, msg ? msg : "");
    tu_result_free(&r);
    rc = run(&r, gen_auto, NULL);
    ok(rc == 0 && (strstr(r.err, "cpu backend") || strstr(r.err, "cuda backend")) &&
           !strstr(r.err, "cairn generate:"),
       "generate --backend auto with the real module -> runs, no error (%d: %s)", rc, r.err);
    tu_result_free(&r);
#else
    (void)good, (void)abi;
    rc = run(&r, gen_cuda, NULL);
    ok(rc == 69 && strstr(r.err, "no CUDA backend"),
       "generate --backend cuda in a build without CUDA -> exit 69 (%d)", rc);
    tu_result_free(&r);
    rc = run(&r, gen_auto, NULL);
    ok(rc == 0 && strstr(r.err, "cpu backend"),
       "generate --backend auto in a build without CUDA -> cpu (%d)", rc);
    tu_result_free(&r);
#endif
    unlink(model);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: test_plugin GOOD.so ABI.so LAYOUT.so NOENTRY.so\n");
        return 2;
    }
    const char *wrong = cuda_mapped();
    ok(!*wrong, "no CUDA library is mapped at start-up (%s)", *wrong ? wrong : "none");

    char dir[] = "/tmp/cairn-plugin-XXXXXX", text[512];
    if (!mkdtemp(dir))
        tap_skip_all("no temp dir");
    snprintf(text, sizeof text, "%s/libtext.so", dir);
    ok(tu_write_file(text, "not an ELF file\n", 16) == 0, "text file written");

    check_open(argv[1], argv[2], argv[3], argv[4], text);
    check_select(argv[1]);
    wrong = cuda_mapped();
    ok(!*wrong, "still no CUDA library mapped after the fake modules (%s)",
       *wrong ? wrong : "none");

    const char *bin = getenv("CAIRN_BIN");
    if (bin && access(bin, X_OK) == 0)
        check_cli(bin, argv[1], argv[2], dir);
    else
        skip("CAIRN_BIN not set: no command-line checks");
    unlink(text);
    rmdir(dir);
    return tap_done();
}
