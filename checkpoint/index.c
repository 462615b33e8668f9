/* checkpoint/index.c - reading the store's secondary indexes, consumed messages, statistics.
 *
 * The status index (state|due|id), the tenant index and the finished index are scanned by key
 * range, a batch of ids at a time, calling back after each batch's cursor is closed: a callback
 * may write to the same databases, which would invalidate a live cursor. Consumed-message records
 * are kept with a time index so gc can forget them once the dedupe window has passed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/store_impl.h"

int cairn__msg_get(cairn__txn *t, const char *msg_id, char task_out[CAIRN__ID_MAX + 1])
{
    MDB_val k = {strlen(msg_id), (void *)msg_id}, v;
    int rc = cairn__get(t, t->s->msgs, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read message record");
    size_t n = v.mv_size > CAIRN__ID_MAX ? CAIRN__ID_MAX : v.mv_size;
    memcpy(task_out, v.mv_data, n);
    task_out[n] = 0;
    return 0;
}

int cairn__msg_put(cairn__txn *t, const char *msg_id, const char *task)
{
    MDB_val k = {strlen(msg_id), (void *)msg_id}, v = {strlen(task), (void *)task};
    int rc = cairn__put(t, t->s->msgs, &k, &v, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST)
        return 0; /* recorded before: keep its first time */
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "write message record");
    key tk;
    tk.len = 0;
    key_u64(&tk, (uint64_t)cairn__now_ms());
    key_str(&tk, msg_id);
    return cairn__put_empty(t, t->s->msgtime, &tk);
}

int cairn__msg_expire(cairn__txn *t, int64_t upto_ms, uint32_t limit, uint32_t *n_out)
{
    MDB_cursor *c;
    uint32_t n = 0;
    int rc = mdb_cursor_open(t->txn, t->s->msgtime, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k, v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_FIRST); rc == 0 && n < limit;) {
        if (k.mv_size < 8 || (int64_t)rd_be64(k.mv_data) > upto_ms)
            break;
        MDB_val mk = {k.mv_size - 8, (char *)k.mv_data + 8};
        int d = cairn__del(t, t->s->msgs, &mk);
        if (d && d != MDB_NOTFOUND) {
            rc = d;
            break;
        }
        if ((rc = cairn__cursor_del(t, c)))
            break;
        n++;
        rc = cairn__cursor_get(t, c, &k, &v, MDB_GET_CURRENT);
        if (rc == MDB_NOTFOUND || rc == EINVAL)
            rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    *n_out = n;
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "forget old messages") : 0;
}

/* ------------------------------------------------------------------ index scans */

/* Ids are collected a batch at a time and then called back, never under a live cursor:
 * callbacks may write to the same databases, which would invalidate it. The next batch starts
 * after the last key of the one before (looked up again, since a callback may have deleted it),
 * so a scan that a callback stops early (a `list --limit`, a gc transaction's quota) reads a
 * batch past what it uses, not the whole range: its cost follows the rows it returns, not the
 * size of the store. A key a callback writes ahead of the scan's position is met later. */
enum { SCAN_BATCH = 256 };

typedef struct idlist {
    size_t n;
    char ids[SCAN_BATCH][CAIRN__ID_MAX + 1];
    key last; /* the batch's last key: where the next batch starts */
} idlist;

static void idlist_add(idlist *l, const MDB_val *k, size_t skip)
{
    size_t n = k->mv_size - skip > CAIRN__ID_MAX ? CAIRN__ID_MAX : k->mv_size - skip;
    memcpy(l->ids[l->n], (char *)k->mv_data + skip, n);
    l->ids[l->n++][n] = 0;
    l->last.len = k->mv_size > sizeof l->last.b ? sizeof l->last.b : k->mv_size;
    memcpy(l->last.b, k->mv_data, l->last.len);
}

/* Scans dbi from `start` while keys begin with start->b[0..plen) (and, with has_upto, while the
 * 8 bytes before `skip` are <= upto). The id is the key's bytes after `skip`. */
static int scan(cairn__txn *t, MDB_dbi dbi, const key *start, size_t plen, size_t skip,
                int64_t upto, int has_upto, cairn__id_cb cb, void *arg)
{
    idlist *l = malloc(sizeof *l);
    if (!l)
        return CAIRN_ENOMEM;
    int rc = 0, first = 1, more = 1;
    while (rc == 0 && more) {
        MDB_cursor *c;
        if ((rc = mdb_cursor_open(t->txn, dbi, &c))) {
            rc = cairn__mdb_fail(t, t->s, rc, "open cursor");
            break;
        }
        MDB_val k, v;
        l->n = 0;
        if (first) {
            k = (MDB_val){start->len, (void *)start->b};
            rc = cairn__cursor_get(t, c, &k, &v, start->len ? MDB_SET_RANGE : MDB_FIRST);
        } else {
            k = (MDB_val){l->last.len, l->last.b};
            rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE);
            if (rc == 0 && k.mv_size == l->last.len && memcmp(k.mv_data, l->last.b, k.mv_size) == 0)
                rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT); /* met in the batch before */
        }
        first = 0;
        for (; rc == 0; rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
            if (k.mv_size < skip || memcmp(k.mv_data, start->b, plen) != 0 ||
                (has_upto && (int64_t)rd_be64((unsigned char *)k.mv_data + skip - 8) > upto)) {
                more = 0;
                break;
            }
            idlist_add(l, &k, skip);
            if (l->n == SCAN_BATCH)
                break;
        }
        mdb_cursor_close(c); /* before the callbacks: their writes would invalidate it */
        if (rc == MDB_NOTFOUND)
            more = 0;
        rc = cairn__scan_end(t, rc, "scan index");
        for (size_t i = 0; rc == 0 && i < l->n; i++)
            rc = cb(l->ids[i], arg);
    }
    free(l);
    return rc == 1 ? 0 : rc;
}

int cairn__due_each(cairn__txn *t, cairn_state state, int64_t upto_ms, cairn__id_cb cb, void *arg)
{
    key k;
    k.len = 0;
    k.b[k.len++] = (char)state;
    return scan(t, t->s->due, &k, 1, 9, upto_ms, 1, cb, arg);
}

int cairn__due_count(cairn__txn *t, cairn_state state, int64_t upto_ms, uint64_t cap, uint64_t *n,
                     int64_t *first_ms)
{
    *n = 0;
    *first_ms = 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->due, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    char start = (char)state;
    MDB_val k = {1, &start}, v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
        const unsigned char *p = k.mv_data;
        if (k.mv_size < 9 || p[0] != (unsigned char)state)
            break;
        int64_t due = (int64_t)rd_be64(p + 1);
        if (!*first_ms)
            *first_ms = due ? due : 1;
        if (due > upto_ms || *n >= cap)
            break;
        ++*n;
    }
    mdb_cursor_close(c);
    return cairn__scan_end(t, rc == MDB_NOTFOUND ? 0 : rc, "count the due index");
}

int cairn__tenant_each(cairn__txn *t, const char *tenant, cairn__id_cb cb, void *arg)
{
    key k;
    k.len = 0;
    key_str(&k, tenant), key_nul(&k);
    return scan(t, t->s->tenants, &k, k.len, k.len, 0, 0, cb, arg);
}

int cairn__finished_each(cairn__txn *t, int64_t from_ms, int64_t upto_ms, cairn__id_cb cb,
                         void *arg)
{
    key k;
    k.len = 0;
    if (from_ms > 0)
        key_u64(&k, (uint64_t)from_ms);
    return scan(t, t->s->finished, &k, 0, 8, upto_ms, 1, cb, arg);
}

/* mdb_reader_list's lines ("pid thread txnid", txnid "-" when idle): the other processes'
 * readers holding a snapshot, and the oldest. */
static int reader_line(const char *msg, void *arg)
{
    cairn__store_stats *out = arg;
    int pid;
    char th[64], txn[64];
    if (sscanf(msg, "%d %63s %63s", &pid, th, txn) != 3 || pid == (int)getpid() ||
        strcmp(txn, "-") == 0 || strspn(txn, "0123456789") != strlen(txn))
        return 0;
    uint64_t id = strtoull(txn, NULL, 10);
    if (!out->readers++ || id < out->oldest_reader_txn) {
        out->oldest_reader_txn = id;
        out->oldest_reader_pid = pid;
    }
    return 0;
}

int cairn__store_stats_get(cairn__txn *t, cairn__store_stats *out)
{
    memset(out, 0, sizeof *out);
    /* one record, at any size (records.c: the counts) */
    uint64_t c[CAIRN__COUNTS];
    int rc = cairn__counts_get(t, c);
    for (int s = 0; s < CAIRN_STATE_COUNT && !rc; s++)
        out->by_state[s] = c[s];
    out->tombstones = rc ? 0 : c[CAIRN__C_TOMBSTONES];
    out->step_records = rc ? 0 : c[CAIRN__C_STEPS];
    out->audit_records = rc ? 0 : c[CAIRN__C_AUDIT];
    MDB_stat st;
    if (!rc && mdb_stat(t->txn, t->s->msgs, &st) == 0)
        out->messages = st.ms_entries;
    MDB_envinfo info;
    MDB_stat est;
    if (!rc && mdb_env_info(t->s->env, &info) == 0 && mdb_env_stat(t->s->env, &est) == 0) {
        out->map_size = info.me_mapsize;
        out->page_size = est.ms_psize;
        out->map_used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
        out->last_txn = info.me_last_txnid;
    }
    out->durability = t->s->durability;
    uint64_t n;
    int64_t first;
    if (!rc && !(rc = cairn__due_count(t, CAIRN_IN_DOUBT, 0, 0, &n, &first)))
        out->oldest_in_doubt_ms = first;
    if (!rc && !(rc = cairn__due_count(t, CAIRN_FAILED, cairn__now_ms(), CAIRN_STATS_DUE_MAX, &n,
                                       &first))) {
        out->next_retry_ms = first;
        out->retry_due = n;
    }
    if (!rc) {
        mdb_reader_list(t->s->env, reader_line, out);
        if (t->s->synced) /* the marker's commit, or a later one a journal flush covered */
            out->durable_txn = cairn__synced_durable_commit(t->s);
    }
    return rc;
}
