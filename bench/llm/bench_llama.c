/* bench/llm/bench_llama.c - cairn's CPU prompt and decode speed against llama.cpp's llama-bench,
 * on the same GGUF files, with the same threads, in the same run.
 *
 * Each model (a random-weight llama shape of bench-llm's, every matrix of one type) is written
 * to a file by the project's model writer (tests/model/mkmodel.h, what cairn-mkmodel writes),
 * and both engines read that file. A round measures cairn in process (the file mapped as
 * `cairn generate` maps it: a prompt of --prompt tokens from an empty cache, then --gen decode
 * steps from position 0, each one token, as llama-bench's pp and tg tests do), then runs
 * `llama-bench -r 1` on the file as a child process, its JSON read with jansson. Rounds
 * alternate the two (--rounds, 3 by default), so the load the other users of a shared machine
 * put on it falls on both; the table gives each side's median round and their ratio, and the
 * load average at the start and end of each file's rounds. Without the peer (--peer DIR,
 * else CAIRN_PEER_LLAMA_CPP, else ../shared/peers/llama.cpp beside the source tree) it
 * prints cairn's figures alone and says so.
 *
 * Like for like: both sides use a KV cache of halves unless --cache f32 (llama-bench's default
 * is f16), the peer's default batch sizes (a 128-token prompt is one chunk on both), and its
 * tg test's token-by-token decode from an empty cache. cairn's decode includes computing the
 * logits (llama-bench's does too) but no sampling.
 *
 *   bench-llama [--sizes 110M,1B] [--types Q8_0,Q4_0,Q4_K] [--threads 2] [--rounds 3]
 *               [--prompt 128] [--gen 64] [--cache f16|f32] [--peer DIR] [--dir DIR] [--smoke]
 *
 * --dir keeps the files there (and reuses one already written: the name holds the shape, type
 * and seed); without it they go to a temporary folder removed at the end. --smoke is the short
 * form the bench-smoke suite runs: the 15M shape in Q4_0, one round, 16 + 8 tokens.
 *
 * Not a test: it never fails on a time.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/llm/bench_util.h"
#include "gpu/backend.h"
#include "gpu/cpu/kernels_cpu.h"
#include "gpu/gguf.h"
#include "gpu/model.h"
#include "tests/model/mkmodel.h"
#include "testutil.h"

#ifndef CAIRN_SOURCE_ROOT
#define CAIRN_SOURCE_ROOT "."
#endif

#define MAX_ROUNDS 16

/* the temporary folder of the files, removed at exit however the run ends */
static char *tmp_dir;
static void remove_tmp(void)
{
    if (tmp_dir)
        tu_rm_rf(tmp_dir);
}

static double load_avg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && st.st_size > 0;
}

/* the model of shape sh and type ty written to path (0, or -1 with a message) */
static int write_model(const llm_shape *sh, uint32_t ty, const char *path)
{
    mk_spec s;
    shape_spec(sh, ty, &s);
    s.tokenizer = 1; /* llama.cpp refuses a file without a vocabulary */
    s.seed = 1;
    unsigned char *buf = NULL;
    size_t len = 0;
    if (mk_model(&s, &buf, &len) != 0) {
        fprintf(stderr, "bench-llama: cannot build the %s %s model\n", sh->name,
                cairn__ggml_type_name(ty));
        return -1;
    }
    FILE *f = fopen(path, "wb");
    const int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0)
        errno = EIO;
    free(buf);
    if (!ok) {
        fprintf(stderr, "bench-llama: cannot write %s: %s\n", path, strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}

/* One cairn round on an open backend: *pp the prompt's tok/s (n_prompt tokens from position
 * 0), *tg the decode's (n_gen steps from position 0). 0 or the backend's error. */
static int cairn_round(cairn__backend *b, int n_vocab, int n_prompt, int n_gen, float *logits,
                       double *pp, double *tg)
{
    int32_t *toks = malloc((size_t)n_prompt * sizeof *toks);
    if (!toks)
        return -1;
    for (int i = 0; i < n_prompt; i++)
        toks[i] = (int32_t)(3 + (i * 7919) % (n_vocab - 3));
    double t = now_s();
    int rc = cairn__backend_forward(b, toks, n_prompt, 0, logits, 0);
    *pp = n_prompt / (now_s() - t);
    t = now_s();
    for (int i = 0; i < n_gen && rc == 0; i++) {
        const int32_t tk = toks[i % n_prompt];
        rc = cairn__backend_forward(b, &tk, 1, i, logits, 0);
    }
    *tg = n_gen / (now_s() - t);
    free(toks);
    return rc;
}

/* One llama-bench round on path: *pp and *tg as its JSON gives them (avg_ts of the test with
 * n_prompt > 0, of the one with n_gen > 0). 0, or -1 with a message. */
static int peer_round(const char *exe, const char *path, int threads, int n_prompt, int n_gen,
                      const char *cache, double *pp, double *tg)
{
    char th[16], np[16], ng[16];
    snprintf(th, sizeof th, "%d", threads);
    snprintf(np, sizeof np, "%d", n_prompt);
    snprintf(ng, sizeof ng, "%d", n_gen);
    const char *argv[] = {exe,  "-m", path,   "-t",  th,     "-p",  np,   "-n",   ng,
                          "-r", "1",  "-ctk", cache, "-ctv", cache, "-o", "json", NULL};
    tu_result r;
    tu_run(&r, argv, NULL, NULL, 0, 600000);
    int rc = -1;
    json_error_t je;
    json_t *root = r.code == 0 ? json_loads(r.out, 0, &je) : NULL;
    *pp = *tg = 0;
    if (json_is_array(root)) {
        size_t i;
        json_t *row;
        json_array_foreach(root, i, row)
        {
            const json_int_t p = json_integer_value(json_object_get(row, "n_prompt"));
            const json_int_t g = json_integer_value(json_object_get(row, "n_gen"));
            const double ts = json_number_value(json_object_get(row, "avg_ts"));
            if (p > 0 && g == 0)
                *pp = ts;
            else if (g > 0 && p == 0)
                *tg = ts;
        }
        rc = *pp > 0 && *tg > 0 ? 0 : -1;
    }
    if (rc != 0) {
        const char *e = r.err;
        const size_t n = strlen(e);
        fprintf(stderr, "bench-llama: llama-bench on %s: exit %d%s\n%s\n", path, r.code,
                root ? ", no pp and tg rows in its JSON" : "", n > 2000 ? e + n - 2000 : e);
    }
    json_decref(root);
    tu_result_free(&r);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench-llama [--sizes 110M,1B] [--types Q8_0,Q4_0,Q4_K] [--threads N] "
                    "[--rounds N] [--prompt N] [--gen N] [--cache f16|f32] [--peer DIR] "
                    "[--dir DIR] [--smoke]\n");
}

int main(int argc, char **argv)
{
    char sizes[256] = "110M,1B", types[256] = "Q8_0,Q4_0,Q4_K", cache[8] = "f16";
    int threads = 2, rounds = 3, n_prompt = 128, n_gen = 64;
    const char *peer = getenv("CAIRN_PEER_LLAMA_CPP"), *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--smoke") == 0) {
            snprintf(sizes, sizeof sizes, "15M");
            snprintf(types, sizeof types, "Q4_0");
            rounds = 1, n_prompt = 16, n_gen = 8;
            continue;
        }
        if (!v) {
            usage();
            return 64;
        }
        i++;
        if (strcmp(a, "--sizes") == 0)
            snprintf(sizes, sizeof sizes, "%s", v);
        else if (strcmp(a, "--types") == 0)
            snprintf(types, sizeof types, "%s", v);
        else if (strcmp(a, "--threads") == 0)
            threads = atoi(v);
        else if (strcmp(a, "--rounds") == 0)
            rounds = atoi(v);
        else if (strcmp(a, "--prompt") == 0)
            n_prompt = atoi(v);
        else if (strcmp(a, "--gen") == 0)
            n_gen = atoi(v);
        else if (strcmp(a, "--cache") == 0 && (!strcmp(v, "f16") || !strcmp(v, "f32")))
            snprintf(cache, sizeof cache, "%s", v);
        else if (strcmp(a, "--peer") == 0)
            peer = v;
        else if (strcmp(a, "--dir") == 0)
            dir = v;
        else {
            usage();
            return 64;
        }
    }
    if (threads < 1 || rounds < 1 || rounds > MAX_ROUNDS || n_prompt < 1 || n_gen < 1) {
        fprintf(stderr, "bench-llama: --threads, --prompt and --gen must be >= 1, --rounds 1-%d\n",
                MAX_ROUNDS);
        return 64;
    }
    /* the peer: llama-bench in --peer, CAIRN_PEER_LLAMA_CPP or the shared folder */
    char exe[4096];
    snprintf(exe, sizeof exe, "%s/llama-bench",
             peer ? peer : CAIRN_SOURCE_ROOT "/../shared/peers/llama.cpp");
    const int have_peer = access(exe, X_OK) == 0;
    if (!dir) {
        dir = tmp_dir = tu_mkdtemp("bench-llama");
        atexit(remove_tmp);
    } else if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench-llama: cannot make %s: %s\n", dir, strerror(errno));
        return 73;
    }
    const int ct = strcmp(cache, "f16") == 0 ? CAIRN__CACHE_F16 : CAIRN__CACHE_F32;
    printf("bench-llama: %d threads, %s kernels, cache %s, pp%d and tg%d, %d rounds "
           "alternating, medians\n",
           threads, cairn__kernels_isa(), cache, n_prompt, n_gen, rounds);
    if (have_peer)
        printf("bench-llama: peer %s\n", exe);
    else
        printf("bench-llama: no llama.cpp peer (%s not found): cairn's figures alone\n", exe);
    printf("\n%-5s %-5s %11s %11s %7s %11s %11s %7s %11s\n", "size", "type", "cairn pp", "llama pp",
           "pp x", "cairn tg", "llama tg", "tg x", "load");
    int status = 0;
    char *ssave = NULL;
    for (char *sz = strtok_r(sizes, ",", &ssave); sz; sz = strtok_r(NULL, ",", &ssave)) {
        const llm_shape *sh = find_shape(sz);
        if (!sh) {
            fprintf(stderr, "bench-llama: unknown size '%s'\n", sz);
            return 64;
        }
        char tcopy[256];
        snprintf(tcopy, sizeof tcopy, "%s", types);
        char *tsave = NULL;
        for (char *tn = strtok_r(tcopy, ",", &tsave); tn; tn = strtok_r(NULL, ",", &tsave)) {
            uint32_t ty;
            const int ok = shape_type("bench-llama", sh, tn, &ty);
            if (ok < 0)
                return 64;
            if (ok == 0)
                continue;
            char path[4200];
            snprintf(path, sizeof path, "%s/%s-%s-seed1.gguf", dir, sh->name, tn);
            if (!file_exists(path) && write_model(sh, ty, path) != 0)
                return 70;
            char err[512];
            cairn__model *m = NULL;
            cairn__backend *b = NULL;
            const cairn__backend_opts bo = {.n_ctx = n_prompt + n_gen + 1,
                                            .n_threads = threads,
                                            .n_batch = n_prompt,
                                            .cache_type = ct};
            if (cairn__model_open(path, &m, err, sizeof err) != 0 ||
                cairn__backend_new("cpu", m, &bo, &b, err, sizeof err) != 0) {
                fprintf(stderr, "bench-llama: %s: %s\n", path, err);
                return 70;
            }
            float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
            double cpp[MAX_ROUNDS], ctg[MAX_ROUNDS], lpp[MAX_ROUNDS], ltg[MAX_ROUNDS];
            /* warm-up, as llama-bench's: the pages of the file and the threads */
            int rc = cairn_round(b, m->n_vocab, n_prompt, 1, logits, &cpp[0], &ctg[0]);
            const double load0 = load_avg();
            int peer_ok = have_peer;
            for (int r = 0; r < rounds && rc == 0; r++) {
                rc = cairn_round(b, m->n_vocab, n_prompt, n_gen, logits, &cpp[r], &ctg[r]);
                if (peer_ok &&
                    peer_round(exe, path, threads, n_prompt, n_gen, cache, &lpp[r], &ltg[r]) != 0)
                    peer_ok = 0, status = 1;
            }
            if (rc != 0) {
                fprintf(stderr, "bench-llama: %s: %s\n", path, cairn__backend_errmsg(b));
                return 70;
            }
            const double load1 = load_avg();
            const double cp = median(cpp, rounds), cg = median(ctg, rounds);
            char lp[16] = "-", lg[16] = "-", rp[16] = "-", rg[16] = "-", ld[32];
            if (peer_ok) {
                const double p = median(lpp, rounds), g = median(ltg, rounds);
                snprintf(lp, sizeof lp, "%.1f", p);
                snprintf(lg, sizeof lg, "%.1f", g);
                snprintf(rp, sizeof rp, "%.2fx", cp / p);
                snprintf(rg, sizeof rg, "%.2fx", cg / g);
            }
            snprintf(ld, sizeof ld, "%.1f-%.1f", load0, load1);
            printf("%-5s %-5s %11.1f %11s %7s %11.1f %11s %7s %11s\n", sh->name, tn, cp, lp, rp, cg,
                   lg, rg, ld);
            if (rounds > 1) { /* each round, to show the spread */
                printf("      rounds:");
                for (int r = 0; r < rounds; r++)
                    if (peer_ok)
                        printf(" %.0f/%.0f %.1f/%.1f%s", cpp[r], lpp[r], ctg[r], ltg[r],
                               r + 1 < rounds ? ";" : "");
                    else
                        printf(" %.0f %.1f%s", cpp[r], ctg[r], r + 1 < rounds ? ";" : "");
                printf("\n");
            }
            fflush(stdout);
            free(logits);
            cairn__backend_free(b);
            cairn__model_free(m);
            if (tmp_dir) /* the 1B files weigh a GB or more */
                remove(path);
        }
    }
    return status;
}
