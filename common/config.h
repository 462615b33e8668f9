/* common/config.h - the one configuration reader every step uses: a section of the config file
 * (a jansson object) is read into the step's struct by a table of its fields.
 *
 * A table row names a key, its type, the struct member it fills (CAIRN__CFG_AT) and the rules
 * of the key: required or default, range, choices, non-empty. The same table declares every key
 * the section may hold, so a key no table names is refused ("a typo never silently drops a
 * setting"), and it says which members are owned, so cairn__cfg_release() frees what a read
 * filled. Keys with rules of their own (a secret read from a file, a string-or-array) are
 * declared with CAIRN__CFG_OTHER and read by the caller, whose messages go through
 * cairn__cfg_fail() so that every message has the same form:
 *
 *     <path>.<key>: <what is wrong>         generate.max_tokens: must be an integer from 1 to ...
 *     <path>.<key>[<i>]: <what is wrong>    retrieve.query_fields[1]: must not be empty
 *
 * Internal to libcairn (hidden `cairn__` symbols). Every fallible call returns 0 or a negative
 * CAIRN_E* code and writes its message into the reader's err buffer (common/str.h's convention:
 * err may be NULL).
 */
#ifndef CAIRN_COMMON_CONFIG_H
#define CAIRN_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cairn.h"

/* What a row's member holds, and how the key's JSON value becomes it. */
typedef enum cairn__cfg_type {
    CAIRN__CFG_OTHER, /* no member: the key is known, the caller reads it */
    CAIRN__CFG_STR,   /* char *, malloc'd (NULL when absent without a default); no NUL inside */
    CAIRN__CFG_PATH,  /* a CAIRN__CFG_STR that, when relative, is taken relative to base_dir */
    CAIRN__CFG_BOOL,  /* int, 0 or 1, from true/false */
    CAIRN__CFG_INT,   /* an integer member of 4 or 8 bytes (int, long, size_t, uint64_t), in
                       * [lo, hi]; a fraction is an error, not silently truncated */
    CAIRN__CFG_NUM,   /* float or double, in [lo, hi] */
    CAIRN__CFG_ENUM,  /* int: the index of the string in `choices` */
    CAIRN__CFG_STRS,  /* char **, malloc'd and NULL-terminated, of non-empty strings, with their
                       * number in the size_t member at count_off */
} cairn__cfg_type;

/* An INT row's hi when the only bound is lo: the message then says "a non-negative integer". */
#define CAIRN__CFG_NO_MAX 9223372036854775807.0

typedef struct cairn__cfg_field {
    const char *key; /* NULL ends a table */
    cairn__cfg_type type;
    size_t off, size; /* the member filled: CAIRN__CFG_AT(struct type, member) */
    size_t count_off; /* STRS: the size_t member counting the strings (CAIRN__CFG_COUNT) */
    int nonempty;     /* STR, PATH: "" is refused; STRS: [] is refused */
    double lo, hi;    /* INT, NUM: the inclusive range */
    double def;       /* INT, NUM, BOOL: the value when the key is absent */
    const char *sdef; /* STR, PATH: the value when absent (copied); ENUM: the default choice */
    const char *const *choices; /* ENUM: NULL-terminated */
    const char *required;       /* NULL: optional; else the text when absent ("is required") */
    const char *unit;           /* INT, NUM: said after the range ("(milliseconds)") */
    int tuning; /* a setting of how the step runs, not of what it produces (threads, timeouts,
                 * how often progress is saved): left out of the step's version
                 * (cairn__cfg_version), so changing it is no graph change */
} cairn__cfg_field;

#define CAIRN__CFG_AT(T, member) .off = offsetof(T, member), .size = sizeof(((T *)0)->member)
#define CAIRN__CFG_COUNT(T, member) .count_off = offsetof(T, member)
/* A row that only declares a key the caller reads itself. */
#define CAIRN__CFG_KNOWN(k)                                                                        \
    {                                                                                              \
        .key = (k), .type = CAIRN__CFG_OTHER                                                       \
    }

/* One section being read: the object, the path that names it in messages ("generate",
 * "notify[1]"; "" for the top level) and where messages go. Filled by cairn__cfg_open(). */
typedef struct cairn__cfg {
    const json_t *obj;
    const char *path;
    const char *base_dir; /* PATH rows are relative to it; NULL: left as they are */
    char *err;
    size_t errlen;
} cairn__cfg;

/* Starts reading `obj` (borrowed; it must outlive the reader). NULL is an absent section: every
 * key takes its default and a required one is missing. `path` and `base_dir` are borrowed too.
 * 0, or CAIRN_EJSON "<path>: must be an object". */
int cairn__cfg_open(cairn__cfg *r, const json_t *obj, const char *path, const char *base_dir,
                    char *err, size_t errlen);

/* Writes "<path>.<field>: <fmt...>" (field NULL: "<path>: ...") and returns `code`: the form of
 * every configuration message, for the checks the tables cannot express. */
int cairn__cfg_fail(const cairn__cfg *r, int code, const char *field, const char *fmt, ...)
    CAIRN_PRINTF(4, 5);

/* The row of key in the NULL-terminated list of tables, or NULL. */
const cairn__cfg_field *cairn__cfg_declared(const cairn__cfg_field *const *tables, const char *key);

/* Refuses a key of the section that no table in the NULL-terminated list declares:
 * CAIRN_EJSON "<path>.<key>: <unknown>" (NULL: "unknown field"). 0 when every key is known. */
int cairn__cfg_check_keys(const cairn__cfg *r, const cairn__cfg_field *const *tables,
                          const char *unknown);

/* Reads one row into the struct at `base`. Returns 0, or
 *   CAIRN_EJSON   the message names the key: "is required" (or the row's text), "must be a
 *                 string", "must not be empty", "must not contain NUL characters", "must be
 *                 true or false", "must be an integer from LO to HI", "must be a non-negative
 *                 integer", "must be a number from LO to HI", "must be \"a\", \"b\" or \"c\"[,
 *                 not \"x\"]", "must be an array of strings" ("a non-empty array ..."), and
 *                 for an element "<key>[i]: must be a non-empty string"
 *   CAIRN_ENOMEM  "<path>.<key>: out of memory"
 * A member it filled before a failure stays filled: release the struct either way. */
int cairn__cfg_read_field(const cairn__cfg *r, const cairn__cfg_field *f, void *base);

/* Reads every row of the table, in order, stopping at the first error. */
int cairn__cfg_read(const cairn__cfg *r, const cairn__cfg_field *table, void *base);

/* A section that one table describes, read into a struct of its own: */
typedef struct cairn__cfg_section {
    const char *path;               /* "generate" */
    const cairn__cfg_field *fields; /* every key it may hold */
    size_t size;                    /* of the struct */
    /* After the read: what the table cannot say (cross-field rules, derived values). 0, or an
     * error written through cairn__cfg_fail. NULL: nothing. */
    int (*finish)(const cairn__cfg *r, void *base);
} cairn__cfg_section;

/* cairn__cfg_open, cairn__cfg_check_keys, a zeroed struct of s->size bytes, cairn__cfg_read
 * into it and s->finish. `out` is the address of the caller's struct pointer (a T **): on
 * success it points to the struct, which the caller frees with cairn__cfg_release and free();
 * on failure NULL, with nothing left allocated. Returns what those return. */
int cairn__cfg_parse(const cairn__cfg_section *s, const json_t *obj, const char *base_dir,
                     void *out, char *err, size_t errlen);

/* A step's version from the section being read: a number >= 1 from the SHA-256 of the RFC 8785
 * canonical form of its object without the keys whose rows (in the NULL-terminated list of
 * tables) are `tuning`, so it changes with what the step produces and not with how it runs. A
 * section without such keys keeps the version it had before tuning rows existed; an absent one
 * (NULL object) is 1. Returns 0 and *version, or CAIRN_ENOMEM ("<path>: out of memory"). */
int cairn__cfg_version(const cairn__cfg *r, const cairn__cfg_field *const *tables,
                       uint32_t *version);

/* Frees the members the table's STR, PATH and STRS rows own and sets them to NULL (and the
 * counts to 0); the struct itself stays. Safe on a struct a read filled only in part. */
void cairn__cfg_release(const cairn__cfg_field *table, void *base);

#endif
