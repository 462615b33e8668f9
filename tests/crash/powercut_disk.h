/* powercut_disk.h - the disk model of the power-cut test (test_powercut.c), static helpers.
 *
 * A disk after a power cut holds, for each page of a file, either what the last flush made
 * durable or a later write that happened to reach it: model_file builds such an image page by
 * page from the live file and the copy powercut_shim.c took at the last flush. The other helpers
 * read what the image's first open will face: the newest commit LMDB's meta pages name, and the
 * newest whole slot of cairn's flush marker `synced` (checkpoint/synced.c).
 */
#ifndef CAIRN_TEST_POWERCUT_DISK_H
#define CAIRN_TEST_POWERCUT_DISK_H

#include <openssl/sha.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define PAGE 4096

/* Layouts read here, as this test's own view of them (LMDB 0.9 on a 64-bit machine, and
 * checkpoint/synced.c's marker): a meta page is a 16-byte page header, then MDB_meta, whose
 * magic (u32) is at 0 and whose txnid (u64) is at 128, both little-endian; a marker slot is
 * magic "CAIRNSYN", version u32 BE, page size u32 BE, sequence u64 BE at 16, transaction id u64
 * BE at 24, boot id (40 bytes) at 32, the two meta pages at 72, in version 2 a root record (40
 * bytes: the main database's root page number and that page's SHA-256), then the SHA-256 of
 * all that (version 3 puts the journal record, 16 bytes, before the hash); slots are 12288
 * bytes apart for 4096-byte pages in both versions. */
#define META_MAGIC 0xBEEFC0DEu
#define META_MAGIC_AT (16 + 0)
#define META_TXNID_AT (16 + 128)
#define SLOT_BODY (72 + 2 * PAGE) /* version 1; version 2 adds SLOT_ROOT */
#define SLOT_ROOT 40
#define SLOT_JOURNAL 16 /* version 3: the journal's epoch nonce and the one before */
#define SLOT_SIZE 12288

static uint64_t le_bytes(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t be_bytes(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The newest transaction id among the meta pages (0 and 1) of the LMDB file `path` (NULL: none);
 * 0 if neither is a meta page. */
static uint64_t newest_meta(const char *path)
{
    size_t n = 0;
    unsigned char *d = path ? (unsigned char *)tu_read_file(path, &n) : NULL;
    uint64_t best = 0;
    for (size_t p = 0; d && p < 2 && (p + 1) * PAGE <= n; p++) {
        const unsigned char *m = d + p * PAGE;
        uint64_t id = le_bytes(m + META_TXNID_AT, 8);
        if (le_bytes(m + META_MAGIC_AT, 4) == META_MAGIC && id > best)
            best = id;
    }
    free(d);
    return best;
}

/* The transaction id of the newest whole slot of dir/synced, as synced.c would choose it: 1 and
 * *txnid set, or 0 if no slot is whole. */
static int marker_txnid(const char *dir, uint64_t *txnid)
{
    char *path = tu_fmt("%s/synced", dir);
    size_t n = 0;
    unsigned char *d = (unsigned char *)tu_read_file(path, &n);
    free(path);
    int found = 0;
    uint64_t best_seq = 0;
    for (size_t k = 0; d && k < 2 && k * SLOT_SIZE + SLOT_BODY + SHA256_DIGEST_LENGTH <= n; k++) {
        const unsigned char *s = d + k * SLOT_SIZE;
        unsigned char md[SHA256_DIGEST_LENGTH];
        uint64_t v = be_bytes(s + 8, 4);
        size_t body = SLOT_BODY + (v >= 2 ? SLOT_ROOT : 0) + (v >= 3 ? SLOT_JOURNAL : 0);
        if (memcmp(s, "CAIRNSYN", 8) != 0 || v < 1 || v > 3 || be_bytes(s + 12, 4) != PAGE ||
            k * SLOT_SIZE + body + SHA256_DIGEST_LENGTH > n)
            continue;
        SHA256(s, body, md);
        if (memcmp(md, s + body, sizeof md) != 0)
            continue; /* torn */
        uint64_t seq = be_bytes(s + 16, 8);
        if (!found || seq > best_seq) {
            best_seq = seq;
            *txnid = be_bytes(s + 24, 8);
            found = 1;
        }
    }
    free(d);
    return found;
}

static int copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = tu_read_file(from, &n);
    if (!b)
        return -1;
    int rc = tu_write_file(to, b, n);
    free(b);
    return rc;
}

/* Builds `out` from the live file and the copy the disk surely holds (NULL or missing: nothing
 * flushed). Pages equal in both are that; a differing page is the live one or the flushed one,
 * as coin() says (its low bit). Adds the differing pages to *diff and the live ones taken to
 * *taken. */
static int model_file(const char *live, const char *flushed, const char *out,
                      uint64_t (*coin)(void), int *diff, int *taken)
{
    size_t ln = 0, dn = 0;
    char *l = tu_read_file(live, &ln);
    if (!l)
        return -1;
    char *d = flushed ? tu_read_file(flushed, &dn) : NULL;
    if (!d)
        dn = 0;
    size_t on = ln > dn ? ln : dn;
    char *o = calloc(1, on + 1);
    if (!o) {
        free(l), free(d);
        return -1;
    }
    static const char zero[PAGE];
    for (size_t off = 0; off < on; off += PAGE) {
        size_t lp = off < ln ? (ln - off < PAGE ? ln - off : PAGE) : 0;
        size_t dp = off < dn ? (dn - off < PAGE ? dn - off : PAGE) : 0;
        size_t len = on - off < PAGE ? on - off : PAGE;
        char lpage[PAGE], dpage[PAGE];
        memcpy(lpage, zero, PAGE), memcpy(dpage, zero, PAGE);
        memcpy(lpage, l + off, lp);
        memcpy(dpage, d ? d + off : zero, dp);
        int live_page = 0;
        if (memcmp(lpage, dpage, len) != 0) {
            ++*diff;
            live_page = (int)(coin() & 1);
            *taken += live_page;
        }
        memcpy(o + off, live_page ? lpage : dpage, len);
    }
    int rc = tu_write_file(out, o, on);
    free(l), free(d), free(o);
    return rc;
}

#endif
