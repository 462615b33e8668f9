/* common/hash.c - SHA-256 through OpenSSL EVP (common/hash.h). */
#include "common/hash.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "cairn.h"

void cairn__hex(const unsigned char *bytes, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int cairn__sha256(const void *data, size_t len, unsigned char out[32])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) {
        memset(out, 0, 32);
        return CAIRN_ENOMEM;
    }
    memcpy(out, md, 32);
    return 0;
}

void cairn__sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    out[0] = '\0';
    if (cairn__sha256(data, len, md) == 0)
        cairn__hex(md, 32, out);
}

int cairn__sha256_file(const char *path, char out[65])
{
    enum { CHUNK = 1 << 16 };
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CAIRN_ENOENT;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    char *buf = malloc(CHUNK);
    if (!md || !buf || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(md);
        free(buf);
        close(fd);
        return CAIRN_ENOMEM;
    }
    ssize_t r;
    while ((r = read(fd, buf, CHUNK)) > 0)
        EVP_DigestUpdate(md, buf, (size_t)r);
    free(buf);
    close(fd);
    unsigned char h[EVP_MAX_MD_SIZE];
    unsigned hl = 0;
    int ok = EVP_DigestFinal_ex(md, h, &hl) && hl == 32;
    EVP_MD_CTX_free(md);
    if (r < 0)
        return CAIRN_EIO;
    if (!ok)
        return CAIRN_ENOMEM;
    cairn__hex(h, 32, out);
    return 0;
}
