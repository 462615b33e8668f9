/* test_llm_cfg.c - the generate step's configuration: every allocation failure while parsing
 * comes back as CAIRN_ENOMEM with nothing leaked and nothing half-built handed out.
 *
 * Fault injection: this program defines malloc/calloc/realloc/strdup itself (glibc lets a
 * program interpose them; jansson and OpenSSL allocate through them too) and fails the Nth
 * call after arm(N). The config is parsed once for every N until a parse sees no failure, so
 * each allocation on the way is made to fail once.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "steps/llm.h"
#include "tests/tap.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define HAVE_SANITIZER 1
#endif
#endif

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static long countdown = -1; /* -1: off; else the allocations left before one fails */
static int injected;
static long live; /* blocks allocated and not yet freed */

static int fail_now(void)
{
    if (countdown < 0)
        return 0;
    if (countdown-- == 0) {
        injected = 1;
        countdown = -1; /* one failure per run: what follows is the code's clean-up path */
        return 1;
    }
    return 0;
}

void *malloc(size_t n)
{
    void *p = fail_now() ? NULL : __libc_malloc(n);
    live += p != NULL;
    return p;
}
void *calloc(size_t a, size_t b)
{
    void *p = fail_now() ? NULL : __libc_calloc(a, b);
    live += p != NULL;
    return p;
}
void *realloc(void *p, size_t n)
{
    if (!p)
        return malloc(n);
    if (!n) {
        free(p);
        return NULL;
    }
    return fail_now() ? NULL : __libc_realloc(p, n);
}
void free(void *p)
{
    live -= p != NULL;
    __libc_free(p);
}
char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static void arm(long n)
{
    injected = 0;
    countdown = n;
}

int main(void)
{
#ifdef HAVE_SANITIZER
    tap_skip_all("allocation failures are injected by interposing malloc: not under a sanitizer");
#endif
    const char *text =
        "{\"model\":\"models/m.gguf\",\"backend\":\"cpu\",\"prompt\":\"Describe {{title}}: "
        "{{context}}\",\"system\":\"Be brief.\",\"chat\":\"chatml\",\"context_source\":\"r\","
        "\"threads\":2,\"ctx\":512,\"max_tokens\":8,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":10,\"repeat_penalty\":1.1,\"seed\":7,\"stop\":[\"\\n\\n\",\"END\"],"
        "\"progress_every\":4}";
    json_error_t je;
    json_t *cfg = json_loads(text, 0, &je);
    char err[256];
    cairn__llm_cfg *c = NULL;
    ok(cfg != NULL, "config JSON loads");
    if (!cfg)
        return tap_done();

    int rc = cairn__llm_cfg_parse(cfg, "/etc/cairn", &c, err, sizeof err);
    ok(rc == 0 && c && strcmp(cairn__llm_cfg_context_source(c), "r") == 0 &&
           strlen(cairn__llm_cfg_digest(c)) == 64 && cairn__llm_cfg_uses_context(c),
       "the full config parses without faults (%s)", rc ? err : "ok");
    char digest[65];
    snprintf(digest, sizeof digest, "%s", c ? cairn__llm_cfg_digest(c) : "");
    cairn__llm_cfg_free(c);

    long n, bad = 0, runs = 0;
    for (n = 0; n < 10000; n++) {
        long before = live;
        c = (cairn__llm_cfg *)1;
        err[0] = 0;
        arm(n);
        rc = cairn__llm_cfg_parse(cfg, "/etc/cairn", &c, err, sizeof err);
        countdown = -1;
        runs++;
        if (!injected) { /* every allocation of a parse has been failed once */
            if (rc != 0 || !c || strcmp(cairn__llm_cfg_digest(c), digest) != 0) {
                bad++;
                diag("run %ld: no fault, rc %d", n, rc);
            }
            cairn__llm_cfg_free(c);
            break;
        }
        if (rc != CAIRN_ENOMEM || c != NULL || !strstr(err, "out of memory") || live != before) {
            if (bad++ < 5)
                diag("allocation %ld failed: rc %s, out %p, err \"%s\", %ld blocks leaked", n,
                     cairn_errname(rc), (void *)c, err, live - before);
            if (rc == 0)
                cairn__llm_cfg_free(c);
        }
    }
    ok(n < 10000 && bad == 0,
       "each of the %ld allocations of a parse, failed in turn, gives CAIRN_ENOMEM naming it "
       "and no config, and leaks nothing (%ld wrong)",
       runs - 1, bad);
    ok(runs > 10, "the parse allocates enough to exercise the clean-up paths (%ld)", runs - 1);

    json_decref(cfg);
    return tap_done();
}
