/* gpu/backend_plugin.c - finds and loads the CUDA backend module (libcairn-cuda.so) at run time.
 *
 * The module is the only part of cairn linked against cudart and cuBLAS, whose loading alone
 * costs a process ~70 ms; the program asks for it only when a model is about to run on "cuda" or
 * "auto", so `cairn --help`, a resumed task whose steps are done, or a CPU-only run never pays it.
 *
 * Two ideas make it safe: the module is loaded once per process (pthread_once) and never
 * unloaded, because every backend it creates points at its operations; and the handshake with the
 * module's single entry point checks both an ABI number and a fingerprint of the struct layouts
 * the module reads (cairn__cuda_plugin_layout), so a module left over from another build is
 * refused with CAIRN_EUNSUPPORTED instead of misreading the model.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/backend_plugin.h"
#include "gpu/gguf.h"
#include "gpu/quant.h"

#include "cairn_errors.h"
#define LOAD_FAILED "cannot load the CUDA backend module: "

int cairn__cuda_plugin_open(const char *path, const cairn__cuda_plugin **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    if (!path || !*path)
        return cairn__errf(err, errlen, CAIRN_ENODEVICE, "no CUDA backend module path");
    /* RTLD_LOCAL: cudart's and cuBLAS's symbols stay out of the program's namespace */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return cairn__errf(err, errlen, CAIRN_ENODEVICE, LOAD_FAILED "%s", why ? why : path);
    }
    void *sym = dlsym(h, CAIRN__CUDA_PLUGIN_ENTRY);
    cairn__cuda_plugin_fn *entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer: POSIX guarantees it works */
    if (!sym) {
        const char *why = dlerror(); /* valid until the next dl call: format it before dlclose */
        const int rc = cairn__errf(err, errlen, CAIRN_ENODEVICE,
                                   "not a cairn CUDA backend module: %s", why ? why : path);
        dlclose(h);
        return rc;
    }
    const cairn__cuda_host host = {cairn__cuda_plugin_layout(), cairn__dequant_row, cairn__errf};
    const cairn__cuda_plugin *p = entry(CAIRN__CUDA_PLUGIN_ABI, &host);
    /* A refused module stays loaded: its constructors have run (cudart registers its kernels
     * and exit handlers), and unloading that mid-process buys nothing but risk. */
    if (!p || p->abi != CAIRN__CUDA_PLUGIN_ABI) {
        const unsigned got = p ? p->abi : 0;
        return cairn__errf(
            err, errlen, CAIRN_EUNSUPPORTED,
            "%s implements CUDA module ABI %u, this program needs %u (rebuild and reinstall both)",
            path, got, CAIRN__CUDA_PLUGIN_ABI);
    }
    if (p->layout != host.layout || !p->ops || !p->bandwidth || !p->weight_bytes || !p->dtype ||
        !p->graph_status) {
        const unsigned got = p->layout;
        return cairn__errf(
            err, errlen, CAIRN_EUNSUPPORTED,
            "%s was built against other headers (layout %08x, this program %08x): rebuild and "
            "reinstall both",
            path, got, host.layout);
    }
    *out = p; /* h stays open for the life of the process */
    return 0;
}

#ifdef CAIRN_HAVE_CUDA

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cairn__cuda_plugin *plugin;
static int load_rc;
static char load_err[1024];

static void load_once(void)
{
    const char *env = getenv("CAIRN_CUDA_PLUGIN");
    if (env && *env) { /* an explicit choice: no silent fallback to another module */
        load_rc = cairn__cuda_plugin_open(env, &plugin, load_err, sizeof load_err);
        if (load_rc) {
            char why[sizeof load_err];
            memcpy(why, load_err, sizeof why);
            snprintf(load_err, sizeof load_err, "%s (from CAIRN_CUDA_PLUGIN)", why);
        }
        return;
    }
    /* the build tree first, so a program run from its build directory uses the module built with
     * it rather than an older installed one; then the install location */
    static const char *const paths[] = {
#ifdef CAIRN_CUDA_PLUGIN_BUILD_PATH
        CAIRN_CUDA_PLUGIN_BUILD_PATH,
#endif
#ifdef CAIRN_CUDA_PLUGIN_INSTALL_PATH
        CAIRN_CUDA_PLUGIN_INSTALL_PATH,
#endif
    };
    size_t used = 0;
    load_rc = CAIRN_ENODEVICE;
    snprintf(load_err, sizeof load_err, "no CUDA backend module configured");
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char one[512];
        const int rc = cairn__cuda_plugin_open(paths[i], &plugin, one, sizeof one);
        if (rc == 0) {
            load_rc = 0;
            return;
        }
        if (rc == CAIRN_EUNSUPPORTED) /* a module was there but mismatched: that is the news */
            load_rc = rc;
        /* keep every candidate's reason: "not found" for one and a real failure for the other
         * are both worth reading */
        const char *why = one;
        if (used && strncmp(why, LOAD_FAILED, strlen(LOAD_FAILED)) == 0)
            why += strlen(LOAD_FAILED); /* "cannot load ...: A: not found; B: not found" */
        int n = snprintf(load_err + used, sizeof load_err - used, "%s%s", used ? "; " : "", why);
        if (n > 0)
            used = (size_t)n + used < sizeof load_err ? used + (size_t)n : sizeof load_err - 1;
    }
}

int cairn__cuda_plugin_load(const cairn__cuda_plugin **out, char *err, size_t errlen)
{
    *out = NULL;
    if (pthread_once(&once, load_once) != 0)
        return cairn__errf(err, errlen, CAIRN_ENODEVICE,
                           "cannot load the CUDA backend module (pthread_once)");
    if (load_rc)
        return cairn__errf(err, errlen, load_rc, "%s", load_err);
    *out = plugin;
    return 0;
}

/* In the child of cairn__cuda_device_check: the module as a task would load it, then the
 * driver's own count (its API is stable by soname; the module's has no cheap device query). */
static int probe_device(char *err, size_t errlen)
{
    const cairn__cuda_plugin *p;
    int rc = cairn__cuda_plugin_load(&p, err, errlen);
    if (rc)
        return rc;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return cairn__errf(err, errlen, CAIRN_ENODEVICE, "no CUDA driver: %s",
                           why ? why : "libcuda.so.1");
    }
    int (*init)(unsigned), (*count)(int *);
    void *si = dlsym(h, "cuInit"), *sc = dlsym(h, "cuDeviceGetCount");
    memcpy(&init, &si, sizeof init); /* object to function pointer: POSIX guarantees it works */
    memcpy(&count, &sc, sizeof count);
    int n = 0, e = si && sc ? init(0) : -1;
    if (e == 0)
        e = count(&n);
    if (e == 0 && n > 0)
        return 0;
    if (e == 0 || e == 100) /* 100: CUDA_ERROR_NO_DEVICE */
        return cairn__errf(err, errlen, CAIRN_ENODEVICE, "no CUDA device: none found");
    return cairn__errf(err, errlen, CAIRN_ENODEVICE,
                       "no CUDA device: the driver does not start (CUresult %d)", e);
}

int cairn__cuda_device_check(char *err, size_t errlen)
{
    int fd[2];
    if (pipe(fd) != 0)
        return cairn__errf(err, errlen, CAIRN_ENODEVICE, "cannot ask for a CUDA device: %s",
                           strerror(errno));
    pid_t pid = fork();
    if (pid == 0) { /* the answer: the code, then the message */
        char msg[1024] = "";
        int rc = probe_device(msg, sizeof msg);
        close(fd[0]);
        if (write(fd[1], &rc, sizeof rc) == (ssize_t)sizeof rc)
            (void)!write(fd[1], msg, strlen(msg));
        _exit(0);
    }
    close(fd[1]);
    int rc = 0, status;
    char msg[1024];
    size_t n = 0;
    ssize_t r;
    const int got = pid > 0 && read(fd[0], &rc, sizeof rc) == (ssize_t)sizeof rc;
    while (got && n < sizeof msg - 1 &&
           ((r = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        n += r > 0 ? (size_t)r : 0;
    msg[n] = 0;
    close(fd[0]);
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!got)
        return cairn__errf(err, errlen, CAIRN_ENODEVICE,
                           "cannot ask for a CUDA device: the probe %s",
                           pid < 0 ? "could not start" : "died");
    return rc ? cairn__errf(err, errlen, rc, "%s", msg) : 0;
}

#else

int cairn__cuda_plugin_load(const cairn__cuda_plugin **out, char *err, size_t errlen)
{
    *out = NULL;
    return cairn__errf(err, errlen, CAIRN_EUNSUPPORTED,
                       "this build has no CUDA backend (rebuild with -Dcuda=enabled)");
}

int cairn__cuda_device_check(char *err, size_t errlen)
{
    return cairn__errf(err, errlen, CAIRN_EUNSUPPORTED,
                       "this build has no CUDA backend (rebuild with -Dcuda=enabled)");
}

#endif
