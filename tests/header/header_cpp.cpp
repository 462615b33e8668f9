// header_cpp.cpp - the public header compiled as C++ (-pedantic -Werror) and used from C++:
// extern "C" linkage, enums and function pointer types must work for a C++ caller.
#include "cairn.h"

#include <cstdio>
#include <cstring>

static int n_tests, n_failed;

static void check(bool cond, const char *what)
{
    n_tests++;
    if (!cond)
        n_failed++;
    std::printf("%sok %d - %s\n", cond ? "" : "not ", n_tests, what);
}

extern "C" {
static cairn_step_result step(cairn_ctx *ctx, void *user)
{
    (void)ctx;
    (void)user;
    return CAIRN_STEP_OK;
}
}

int main()
{
    cairn_graph *g = cairn_graph_new("cpp", 2);
    cairn_step *s = cairn_graph_add_step(g, "a", step, nullptr);
    check(g != nullptr && s != nullptr, "graph and step created from C++");
    check(cairn_step_set_retry(s, 5, 10, 100) == CAIRN_OK, "typed setter");
    check(cairn_graph_validate(g) == CAIRN_OK, "validate");
    check(std::strcmp(cairn_strerror(CAIRN_ECONFLICT),
                      "idempotency conflict: same task ID, different payload") == 0,
          "strerror from C++");
    cairn_state st = CAIRN_PENDING;
    check(cairn_state_parse("in_doubt", &st) == 0 && st == CAIRN_IN_DOUBT, "state parse");
    cairn_graph_free(g);
    std::printf("1..%d\n", n_tests);
    return n_failed != 0;
}
