/* header_c.c - the public header compiled as strict C11 (-std=c11 -pedantic -Werror, without
 * _GNU_SOURCE), then used against the shared library: a program that includes only cairn.h must
 * build warning-free under the strictest settings a user may have, and link.
 *
 * It also holds the version together: the header's CAIRN_VERSION_*, the library's
 * cairn_version() and CAIRN__VERSION, meson's project version (passed to every C target of the
 * build), must all say the same.
 */
#include "cairn.h"

#include <stdio.h>
#include <string.h>

static int n_tests, n_failed;

static void check(int cond, const char *what)
{
    n_tests++;
    if (!cond)
        n_failed++;
    printf("%sok %d - %s\n", cond ? "" : "not ", n_tests, what);
}

static cairn_step_result step(cairn_ctx *ctx, void *user)
{
    (void)user;
    msgpack_pack_nil(cairn_ctx_packer(ctx));
    return CAIRN_STEP_OK;
}

int main(void)
{
    cairn_graph *g = cairn_graph_new("hdr", 1);
    cairn_step *s = cairn_graph_add_step(g, "only", step, NULL);
    check(g != NULL && s != NULL, "graph and step created through the public API");
    check(cairn_step_set_delivery(s, CAIRN_EFFECT_AT_LEAST_ONCE) == CAIRN_OK, "typed setter");
    check(cairn_graph_validate(g) == 0 && strlen(cairn_graph_fingerprint(g)) == 64,
          "validate and fingerprint");
    check(strcmp(cairn_errname(CAIRN_EFULL), "CAIRN_EFULL") == 0, "error names");
    check(cairn_state_transition_ok(CAIRN_PENDING, CAIRN_RUNNING, 0) == 1, "state machine");
    check(CAIRN_STATE_COUNT == 6 && CAIRN_IN_DOUBT == 5, "state constants");
    int major = -1, minor = -1, patch = -1;
    const char *v = cairn_version(&major, &minor, &patch);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", CAIRN_VERSION_MAJOR, CAIRN_VERSION_MINOR,
             CAIRN_VERSION_PATCH);
    check(v && strcmp(v, CAIRN__VERSION) == 0 && strcmp(CAIRN_VERSION_STRING, CAIRN__VERSION) == 0,
          "cairn_version(), CAIRN_VERSION_STRING and meson's project version agree");
    check(major == CAIRN_VERSION_MAJOR && minor == CAIRN_VERSION_MINOR &&
              patch == CAIRN_VERSION_PATCH && strcmp(want, v) == 0,
          "and so do the numbers");
    check(cairn_version(NULL, NULL, NULL) == v, "cairn_version takes NULL pointers");
    check(CAIRN_TASK_ID_MAX == 128, "CAIRN_TASK_ID_MAX is published");
    cairn_runner *r = cairn_runner_new();
    check(cairn_runner_add_graph(r, g) == 0 && cairn_step_set_version(s, 2) == CAIRN_EBUSY,
          "a registered graph is frozen: its step setters are CAIRN_EBUSY");
    cairn_runner_free(r);
    cairn_free(NULL);
    cairn_graph_free(g);
    cairn_store_free(NULL);
    cairn_runner_free(NULL);
    cairn_task_free(NULL);
    printf("1..%d\n", n_tests);
    return n_failed != 0;
}
