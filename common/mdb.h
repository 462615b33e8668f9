/* common/mdb.h - LMDB's return codes translated at the boundary into CAIRN_E* codes: one map for
 * the checkpoint store and the retrieval index, so the same LMDB failure means the same exit code
 * wherever it happens.
 *
 * Internal to libcairn (hidden `cairn__` symbols).
 */
#ifndef CAIRN_COMMON_MDB_H
#define CAIRN_COMMON_MDB_H

/* The CAIRN_E* code for an LMDB (or errno) return code rc != 0:
 *   MDB_MAP_FULL, ENOSPC, EDQUOT                      CAIRN_EFULL
 *   ENOMEM                                            CAIRN_ENOMEM
 *   MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID,
 *   MDB_BAD_VALSIZE                                   CAIRN_ECORRUPT
 *   MDB_VERSION_MISMATCH                              CAIRN_ESCHEMA
 *   anything else                                     CAIRN_EIO
 * Callers keep mdb_strerror(rc) and rc in their message. */
int cairn__mdb_code(int rc);

#endif
