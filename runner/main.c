/* runner/main.c - the `cairn` executable: only hands argv to the CLI.
 *
 * The built-in graphs are registered here; a C developer's own program does the same with its
 * own graphs (see examples/ledger).
 */
#include "cairn.h"

int main(int argc, char **argv)
{
    return cairn_cli_main(argc, argv, NULL, 0);
}
