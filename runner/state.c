/* runner/state.c - the task state machine.
 *
 * One table says which transitions are legal and for whom. Ordinary runs and retries can only
 * move a task forward (pending/failed -> running -> a result); only an operator's resolve or
 * invalidate may move a finished task back to pending, so no retry storm can turn a success
 * into new work.
 */
#include <string.h>

#include "cairn.h"

static const char *const state_names[CAIRN_STATE_COUNT] = {
    "pending", "running", "succeeded", "failed", "dead", "in_doubt",
};

const char *cairn_state_name(cairn_state s)
{
    return (unsigned)s < CAIRN_STATE_COUNT ? state_names[s] : "?";
}

int cairn_state_parse(const char *name, cairn_state *out)
{
    for (int i = 0; name && i < CAIRN_STATE_COUNT; i++)
        if (strcmp(name, state_names[i]) == 0) {
            *out = (cairn_state)i;
            return 0;
        }
    return CAIRN_EINVAL;
}

const char *cairn_step_state_name(cairn_step_state s)
{
    static const char *const names[] = {"pending", "intent", "done", "failed", "in_doubt"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

/* legal[from][to]: 1 for runs and retries, 2 for operator actions only. */
// clang-format off
static const unsigned char legal[CAIRN_STATE_COUNT][CAIRN_STATE_COUNT] = {
    /*                  pending running succeeded failed dead in_doubt */
    [CAIRN_PENDING]   = {0,     1,      0,        0,     0,   0},
    [CAIRN_RUNNING]   = {0,     0,      1,        1,     1,   1},
    [CAIRN_SUCCEEDED] = {2,     0,      0,        0,     0,   0},
    [CAIRN_FAILED]    = {2,     1,      0,        0,     0,   0},
    [CAIRN_DEAD]      = {2,     0,      0,        0,     0,   0},
    [CAIRN_IN_DOUBT]  = {2,     0,      0,        0,     0,   0},
};
// clang-format on

int cairn_state_transition_ok(cairn_state from, cairn_state to, int operator_action)
{
    if ((unsigned)from >= CAIRN_STATE_COUNT || (unsigned)to >= CAIRN_STATE_COUNT)
        return 0;
    unsigned char l = legal[from][to];
    return l == 1 || (l == 2 && operator_action);
}
