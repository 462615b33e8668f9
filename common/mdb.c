/* common/mdb.c - the one LMDB -> CAIRN_E* map (common/mdb.h). */
#include "common/mdb.h"

#include <errno.h>

#include <lmdb.h>

#include "cairn_errors.h"

int cairn__mdb_code(int rc)
{
    switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
        return CAIRN_EFULL;
    case ENOMEM:
        return CAIRN_ENOMEM;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_BAD_VALSIZE:
        return CAIRN_ECORRUPT;
    case MDB_VERSION_MISMATCH:
        return CAIRN_ESCHEMA;
    default:
        return CAIRN_EIO;
    }
}
