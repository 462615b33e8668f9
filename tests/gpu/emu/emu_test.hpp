// tests/gpu/emu/emu_test.hpp - what the emulator's test programs share: the element types' names
// and a value's bits (results are compared bit for bit).
#pragma once
#include <cstdint>
#include <cstring>

template <class T> static const char *tname();
template <> const char *tname<float>() { return "f32"; }
template <> const char *tname<__half>() { return "f16"; }
template <> const char *tname<__nv_bfloat16>() { return "bf16"; }

template <class T> static uint32_t bits(T v)
{
    uint32_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
