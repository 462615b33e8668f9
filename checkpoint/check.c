/* checkpoint/check.c - `cairn check`: every record of the store read and verified, as
 * `PRAGMA integrity_check` is for SQLite.
 *
 * Reads go through the checksum layer like any other (checksum.c), so a record that fails is
 * reported and the scan moves on past it. On top of each record's own checksum, each database's
 * keys must be in strictly increasing order (a search relies on it); every task record must
 * decode and have the index entries it implies (records.c); every index entry must be one its
 * task implies; every step, progress, input and audit record (schema 6: but progress, the
 * task's records of those kinds in the tasks tree, reported under the name of the database schema 5
 * kept them in) must belong to a task, and its kind must be one of them. That the file matches its
 * witnesses (size, meta pages, the sync marker) was checked when the store was opened (filecheck.c,
 * synced.c): a store that fails those does not open, and check says so. A split step record's tail
 * (checksum.c) verifies with its head, and a tail without one fails. Each database's record count
 * in LMDB's own directory (which no checksum covers; `stats` shows it) must match what the scan
 * read. One read transaction: a consistent snapshot, whatever other processes commit meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store_impl.h"

typedef struct checker {
    cairn__txn *t;
    cairn__check_cb cb;
    void *arg;
    uint64_t records, problems;
} checker;

static int report_as(checker *c, const char *db, const char *task, const char *msg)
{
    c->problems++;
    return c->cb(db, task, msg, c->arg);
}

static int report(checker *c, MDB_dbi dbi, const char *task, const char *msg)
{
    return report_as(c, cairn__db_name(c->t->s, dbi), task, msg);
}

/* What a record of dbi is reported as: a task's record of the tasks tree by its kind. */
static const char *name_of(cairn_store *s, MDB_dbi dbi, const MDB_val *k)
{
    int kind = dbi == s->tasks ? cairn__key_kind(k, NULL) : 0;
    return kind ? cairn__kind_name(kind) : cairn__db_name(s, dbi);
}

/* The task a key of dbi belongs to: the bytes before the first NUL (the tasks tree, progress)
 * or the whole key (a task record); "" for the other databases. */
static void task_of(cairn_store *s, MDB_dbi dbi, const MDB_val *k, char out[CAIRN__ID_MAX + 1])
{
    out[0] = 0;
    if (dbi != s->tasks && dbi != s->progress)
        return;
    const char *z = memchr(k->mv_data, 0, k->mv_size);
    size_t n = z ? (size_t)(z - (const char *)k->mv_data) : k->mv_size;
    if (n > CAIRN__ID_MAX)
        n = CAIRN__ID_MAX;
    memcpy(out, k->mv_data, n);
    out[n] = 0;
}

/* What one record of dbi implies beyond its checksum. */
static int check_record(checker *c, MDB_dbi dbi, const MDB_val *k, const char *task)
{
    cairn_store *s = c->t->s;
    char why[600];
    cairn__task_rec r;
    int rc = 0;
    int kind = dbi == s->tasks ? cairn__key_kind(k, NULL) : 0;
    if (kind != 0 && kind != CAIRN__K_AUDIT && kind != CAIRN__K_IDEM && kind != CAIRN__K_INPUT &&
        kind != CAIRN__K_STEP && kind != CAIRN__K_TAIL) {
        char what[400];
        cairn__describe_key(s, dbi, k, what, sizeof what);
        snprintf(why, sizeof why,
                 "the %s has a key of no kind of record (byte 0x%02x after the "
                 "ID): the store is damaged",
                 what, kind < 0 ? 0 : kind);
        return report(c, dbi, task, why);
    }
    if (dbi == s->tasks && kind == 0) {
        rc = cairn__task_get(c->t, task, &r);
        if (rc == 0 &&
            (rc = cairn__task_check_indexes(c->t, &r, why, sizeof why)) == CAIRN_ECORRUPT)
            return report(c, s->due, task, why);
        if (rc == 0 && (rc = cairn__task_check_steps(c->t, &r, why, sizeof why)) == CAIRN_ECORRUPT)
            return report_as(c, "steps", task, why);
        if (rc == CAIRN_ECORRUPT || rc == CAIRN_ESCHEMA)
            return report(c, dbi, task, cairn_store_errmsg(s));
        return rc;
    }
    if (dbi == s->due || dbi == s->tenants || dbi == s->finished) {
        rc = cairn__index_entry_check(c->t, dbi, k, why, sizeof why);
        return rc == CAIRN_ECORRUPT ? report(c, dbi, "", why) : rc;
    }
    /* a tail is verified with its head; a reservation may outlive its task record, as the idem
     * database's entries did */
    if ((kind != 0 && kind != CAIRN__K_TAIL && kind != CAIRN__K_IDEM) || dbi == s->progress) {
        const char *name = dbi == s->progress ? "progress" : cairn__kind_name(kind);
        rc = cairn__task_get(c->t, task, &r);
        if (rc == CAIRN_ENOTFOUND) {
            snprintf(why, sizeof why, "a %s record of task '%s', which has no record", name, task);
            return report_as(c, name, task, why);
        }
        return rc == CAIRN_ECORRUPT || rc == CAIRN_ESCHEMA ? 0 : rc; /* reported with tasks */
    }
    return 0;
}

static int check_db(checker *c, MDB_dbi dbi)
{
    cairn__txn *t = c->t;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(t->txn, dbi, &cur);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    uint64_t first = c->records;
    const cairn__join *mark = t->joins;
    unsigned char prev[CAIRN__ID_MAX * 2 + CAIRN__NAME_MAX + 64];
    size_t prev_n = 0;
    int have_prev = 0;
    MDB_val k, v;
    for (rc = cairn__cursor_get(t, cur, &k, &v, MDB_FIRST);;
         rc = cairn__cursor_get(t, cur, &k, &v, MDB_NEXT)) {
        if (rc == MDB_NOTFOUND) {
            rc = 0;
            break;
        }
        if (rc && rc != CAIRN_ECORRUPT) { /* LMDB could not go on: a damaged page */
            char why[300];
            snprintf(why, sizeof why, "the scan stopped after %llu records: %s (LMDB %d)",
                     (unsigned long long)c->records, mdb_strerror(rc), rc);
            rc = report(c, dbi, "", why);
            break;
        }
        c->records++;
        char task[CAIRN__ID_MAX + 1];
        int bad = rc == CAIRN_ECORRUPT; /* k is the record's key all the same */
        task_of(t->s, dbi, &k, task);
        if (bad && (rc = report_as(c, name_of(t->s, dbi, &k), task, cairn_store_errmsg(t->s))))
            break;
        MDB_val p = {prev_n, prev};
        if (have_prev && mdb_cmp(t->txn, dbi, &p, &k) >= 0) {
            char what[400], why[600];
            cairn__describe_key(t->s, dbi, &k, what, sizeof what);
            snprintf(why, sizeof why, "the %s is out of order: a search can miss it", what);
            if ((rc = report_as(c, name_of(t->s, dbi, &k), task, why)))
                break;
        }
        prev_n = k.mv_size < sizeof prev ? k.mv_size : sizeof prev;
        memcpy(prev, k.mv_data, prev_n);
        have_prev = 1;
        if (!bad && (rc = check_record(c, dbi, &k, task)))
            break;
        cairn__txn_joins_free(t, mark); /* no record is kept past its turn */
    }
    mdb_cursor_close(cur);
    /* LMDB's directory keeps each database's entry count (what `stats` shows), unchecksummed */
    MDB_stat st;
    if (!rc && mdb_stat(t->txn, dbi, &st) == 0 && st.ms_entries != c->records - first) {
        char why[200];
        snprintf(why, sizeof why,
                 "LMDB's directory says the %s database has %llu records, the scan read %llu: "
                 "the store is damaged",
                 cairn__db_name(t->s, dbi), (unsigned long long)st.ms_entries,
                 (unsigned long long)(c->records - first));
        rc = report(c, dbi, "", why);
    }
    return rc;
}

int cairn__store_check(cairn__txn *t, cairn__check_cb cb, void *arg, uint64_t *records,
                       uint64_t *problems)
{
    cairn_store *s = t->s;
    checker c = {.t = t, .cb = cb, .arg = arg};
    const MDB_dbi dbis[] = {s->meta,    s->tasks,    s->progress, s->due,
                            s->tenants, s->finished, s->msgs,     s->msgtime};
    int rc = 0;
    for (size_t i = 0; i < sizeof dbis / sizeof *dbis && !rc; i++)
        rc = check_db(&c, dbis[i]);
    /* the counts record against the task records */
    uint64_t kept[CAIRN__COUNTS], seen[CAIRN__COUNTS];
    if (!rc && (rc = cairn__counts_get(t, kept)) == CAIRN_ECORRUPT)
        rc = report(&c, s->meta, "", cairn_store_errmsg(s));
    else if (!rc && (rc = cairn__counts_scan(t, seen)) == CAIRN_ECORRUPT)
        rc = 0; /* the damaged task records are reported above */
    else if (!rc && memcmp(kept, seen, sizeof kept) != 0) {
        char why[200];
        int i = 0;
        while (i < CAIRN__COUNTS - 1 && kept[i] == seen[i])
            i++;
        char what[40];
        snprintf(what, sizeof what, "tasks in state %d", i);
        if (i >= CAIRN__C_TOMBSTONES)
            snprintf(what, sizeof what, "%s",
                     i == CAIRN__C_TOMBSTONES ? "tombstones"
                     : i == CAIRN__C_STEPS    ? "step records"
                                              : "audit records");
        snprintf(why, sizeof why,
                 "the task counts record says %llu %s, the store holds %llu: the store is "
                 "damaged",
                 (unsigned long long)kept[i], what, (unsigned long long)seen[i]);
        rc = report(&c, s->meta, "", why);
    }
    *records = c.records;
    *problems = c.problems;
    if (rc > 0 || rc < -1000) /* an LMDB code a lookup left as it was (a damaged page) */
        rc = cairn__mdb_fail(t, s, rc, "check the store");
    return rc == 1 ? 0 : rc;
}
