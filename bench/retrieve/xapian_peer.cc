/* bench/retrieve/xapian_peer.cc - the Xapian side of bench-retrieve (see xapian_peer.h).
 *
 * Terms go in as Xapian::Document::add_term(term, wdf): no stemming, no positions, the same
 * tokens cairn indexed. Searches are one Enquire over an OR query with BM25Weight, sorted by
 * relevance then docid (Xapian's default), the order cairn uses for ties. The data of each hit
 * is read, as cairn reads each hit's record, so both engines do the same work per result.
 */
#include "bench/retrieve/xapian_peer.h"

#include <xapian.h>

#include <cstdio>
#include <string>
#include <vector>

struct xpeer {
    Xapian::WritableDatabase *wdb = nullptr;
    Xapian::Database *db = nullptr;
    Xapian::Enquire *enq = nullptr;
    std::vector<std::string> data; /* the last search's hits' data */
};

static int fail(char *err, size_t errlen, const char *what, const Xapian::Error &e)
{
    std::snprintf(err, errlen, "xapian: %s: %s", what, e.get_description().c_str());
    return -1;
}

extern "C" xpeer *xpeer_create(const char *dir, char *err, size_t errlen)
{
    xpeer *x = new xpeer;
    try {
        x->wdb = new Xapian::WritableDatabase(dir, Xapian::DB_CREATE_OR_OVERWRITE);
    } catch (const Xapian::Error &e) {
        fail(err, errlen, dir, e);
        delete x;
        return nullptr;
    }
    return x;
}

extern "C" int xpeer_add(xpeer *x, const char *const *term, const size_t *len, const uint32_t *wdf,
                         size_t n, const char *data, size_t dlen, char *err, size_t errlen)
{
    try {
        Xapian::Document doc;
        for (size_t i = 0; i < n; i++)
            doc.add_term(std::string(term[i], len[i]), wdf[i]);
        doc.set_data(std::string(data, dlen));
        x->wdb->add_document(doc);
    } catch (const Xapian::Error &e) {
        return fail(err, errlen, "add_document", e);
    }
    return 0;
}

extern "C" int xpeer_commit(xpeer *x, char *err, size_t errlen)
{
    try {
        x->wdb->commit();
        x->wdb->close();
    } catch (const Xapian::Error &e) {
        return fail(err, errlen, "commit", e);
    }
    return 0;
}

extern "C" int xpeer_compact(const char *src, const char *dst, char *err, size_t errlen)
{
    try {
        Xapian::Database db(src);
        db.compact(dst, Xapian::DBCOMPACT_NO_RENUMBER);
    } catch (const Xapian::Error &e) {
        return fail(err, errlen, "compact", e);
    }
    return 0;
}

extern "C" xpeer *xpeer_open(const char *dir, double k1, double b, char *err, size_t errlen)
{
    xpeer *x = new xpeer;
    try {
        x->db = new Xapian::Database(dir);
        x->enq = new Xapian::Enquire(*x->db);
        /* k2 = 0: no query-length correction; k3 = 1 with wqf 1 leaves the factor at 1;
         * min_normlen = 0: no clamp of short documents' length, as in cairn */
        x->enq->set_weighting_scheme(Xapian::BM25Weight(k1, 0, 1, b, 0));
    } catch (const Xapian::Error &e) {
        fail(err, errlen, dir, e);
        xpeer_free(x);
        return nullptr;
    }
    return x;
}

extern "C" int xpeer_search(xpeer *x, const char *const *term, const size_t *len, size_t n,
                            size_t k, xpeer_hit *hits, size_t *n_hits, char *err, size_t errlen)
{
    *n_hits = 0;
    try {
        std::vector<Xapian::Query> sub;
        sub.reserve(n);
        for (size_t i = 0; i < n; i++)
            sub.emplace_back(std::string(term[i], len[i]));
        x->enq->set_query(Xapian::Query(Xapian::Query::OP_OR, sub.begin(), sub.end()));
        Xapian::MSet m = x->enq->get_mset(0, (Xapian::doccount)k);
        x->data.clear();
        for (Xapian::MSetIterator it = m.begin(); it != m.end(); ++it)
            x->data.push_back(it.get_document().get_data());
        size_t i = 0;
        for (Xapian::MSetIterator it = m.begin(); it != m.end() && i < k; ++it, ++i)
            hits[i] = xpeer_hit{*it, it.get_weight(), x->data[i].data(), x->data[i].size()};
        *n_hits = i;
    } catch (const Xapian::Error &e) {
        return fail(err, errlen, "search", e);
    }
    return 0;
}

extern "C" void xpeer_free(xpeer *x)
{
    if (!x)
        return;
    delete x->enq;
    delete x->db;
    delete x->wdb;
    delete x;
}
