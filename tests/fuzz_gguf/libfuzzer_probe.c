/* tests/fuzz_gguf/libfuzzer_probe.c - the configure-time check that clang can build a libFuzzer
 * target here.
 *
 * meson.build compiles and links this with -fsanitize=fuzzer,address,undefined. A version
 * check is not enough: Debian's clang compiles such a file without complaint and fails only at
 * the link when libclang-rt-14-dev (libFuzzer's runtime) is missing.
 */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return size > 0 && data[0] == 0x7f; }
