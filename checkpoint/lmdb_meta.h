/* checkpoint/lmdb_meta.h - LMDB 0.9's meta page as it lies in data.mdb, for the two readers of
 * the file that run before LMDB maps it: the sync store's marker (synced.c) and the file check
 * (filecheck.c).
 *
 * The page header (page number, then four 16-bit fields: PAGEHDRSZ, 16 bytes on a 64-bit machine)
 * and MDB_meta as mdb.c lays them out on disk, in the machine's own types (pgno_t, txnid_t and
 * size_t are all size_t there). Checked against liblmdb's mdb.c (LMDB 0.9.x, as vendored in
 * netdata/netdata src/vendored/lmdb/mdb.c): MDB_db is md_pad u32, md_flags u16, md_depth u16,
 * md_branch_pages, md_leaf_pages, md_overflow_pages, md_entries, md_root; MDB_meta is mm_magic,
 * mm_version, mm_address, mm_mapsize, mm_dbs[CORE_DBS = 2], mm_last_pg, mm_txnid; FREE_DBI is 0
 * and MAIN_DBI 1; an empty tree's root is P_INVALID, ~(pgno_t)0; meta page 0's free database
 * keeps the page size in md_pad. On x86-64: txnid at 128 of the meta, the main database's root
 * at 112.
 */
#ifndef CAIRN_CHECKPOINT_LMDB_META_H
#define CAIRN_CHECKPOINT_LMDB_META_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CAIRN__LMDB_MAGIC 0xBEEFC0DEu
#define CAIRN__LMDB_PAGEHDR (sizeof(size_t) + 8)
#define CAIRN__LMDB_FREE_DBI 0
#define CAIRN__LMDB_MAIN_DBI 1

typedef struct cairn__lmdb_db {
    uint32_t pad; /* in the free database of meta page 0: the page size */
    uint16_t flags, depth;
    size_t branch, leaf, overflow, entries, root;
} cairn__lmdb_db;
typedef struct cairn__lmdb_meta {
    uint32_t magic, version;
    void *address;
    size_t mapsize;
    cairn__lmdb_db dbs[2];
    size_t last_pg, txnid;
} cairn__lmdb_meta;
_Static_assert(sizeof(size_t) != 8 || (offsetof(cairn__lmdb_meta, txnid) == 128 &&
                                       offsetof(cairn__lmdb_meta, dbs) + sizeof(cairn__lmdb_db) +
                                               offsetof(cairn__lmdb_db, root) ==
                                           112),
               "MDB_meta as LMDB 0.9 lays it out on a 64-bit machine");

/* The bytes a meta page needs from its start. */
#define CAIRN__LMDB_META_END (CAIRN__LMDB_PAGEHDR + sizeof(cairn__lmdb_meta))

/* 1 and *m if the page at `page` (at least CAIRN__LMDB_META_END bytes) is a meta page, else 0. */
static inline int cairn__lmdb_meta_get(const unsigned char *page, cairn__lmdb_meta *m)
{
    memcpy(m, page + CAIRN__LMDB_PAGEHDR, sizeof *m);
    return m->magic == CAIRN__LMDB_MAGIC;
}

#endif
