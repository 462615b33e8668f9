/* empty.c - placeholder translation unit while gpu/ has no sources. */
typedef int cairn__gpu_empty;
