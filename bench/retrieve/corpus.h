/* bench/retrieve/corpus.h - the synthetic corpus and queries of bench-retrieve, shared with
 * tests/retrieve/test_bm25.c so the test checks the very queries the benchmark times.
 *
 * A 50k-word vocabulary drawn with a Zipf law (p(rank r) ~ 1/r), documents of 20..200 words,
 * queries of 2..4 distinct words above a rank; one xorshift stream with a fixed seed, so a run
 * that makes the same calls in the same order sees the same bytes. Header-only (static): each
 * program that includes it has its own stream.
 */
#ifndef CAIRN_BENCH_RETRIEVE_CORPUS_H
#define CAIRN_BENCH_RETRIEVE_CORPUS_H

#include <stdint.h>
#include <string.h>

#define CORPUS_VOCAB 50000

static uint64_t corpus_rng = 0x9e3779b97f4a7c15ull;
static uint64_t corpus_rnd(void) /* xorshift64* */
{
    corpus_rng ^= corpus_rng >> 12;
    corpus_rng ^= corpus_rng << 25;
    corpus_rng ^= corpus_rng >> 27;
    return corpus_rng * 2685821657736338717ull;
}

static char corpus_words[CORPUS_VOCAB][16];
static double corpus_cdf[CORPUS_VOCAB];

/* Word of rank r: its number spelled in consonant-vowel syllables (unique, pronounceable). */
static void corpus_vocab(void)
{
    static const char cons[] = "bcdfghjklmnprstvwxyz", vow[] = "aeiou";
    for (int r = 0; r < CORPUS_VOCAB; r++) {
        int v = r + 100; /* at least two syllables */
        char *p = corpus_words[r];
        while (v) {
            int s = v % 100;
            *p++ = cons[s / 5];
            *p++ = vow[s % 5];
            v /= 100;
        }
        *p = 0;
    }
    double sum = 0;
    for (int r = 0; r < CORPUS_VOCAB; r++)
        sum += 1.0 / (r + 1);
    double acc = 0;
    for (int r = 0; r < CORPUS_VOCAB; r++) {
        acc += 1.0 / (r + 1) / sum;
        corpus_cdf[r] = acc;
    }
}

static int corpus_zipf(int min_rank)
{
    for (;;) {
        double u = (double)(corpus_rnd() >> 11) / 9007199254740992.0;
        int lo = 0, hi = CORPUS_VOCAB - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (corpus_cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo >= min_rank)
            return lo;
    }
}

/* A document: 20..200 words separated by spaces into t (room for 200 * 16 bytes); its length
 * in words. */
static int corpus_doc(char *t)
{
    int len = 20 + (int)(corpus_rnd() % 181);
    char *p = t;
    for (int w = 0; w < len; w++) {
        const char *s = corpus_words[corpus_zipf(0)];
        size_t l = strlen(s);
        memcpy(p, s, l);
        p += l;
        *p++ = ' ';
    }
    p[-1] = 0;
    return len;
}

/* A query: 2..4 distinct words of rank >= min_rank, space-separated, into q (80 bytes). */
static void corpus_query(char *q, int min_rank)
{
    int nt = 2 + (int)(corpus_rnd() % 3), picked[4];
    for (int i = 0; i < nt; i++) {
        int r, dup;
        do {
            r = corpus_zipf(min_rank);
            dup = 0;
            for (int j = 0; j < i; j++)
                dup |= picked[j] == r;
        } while (dup);
        picked[i] = r;
    }
    q[0] = 0;
    for (int i = 0; i < nt; i++) {
        strcat(q, i ? " " : "");
        strcat(q, corpus_words[picked[i]]);
    }
}

#endif
