/* tests/notify/test_notify_scrub.c - no secret, whole or in part, in a notify error message.
 *
 * The secret (a webhook's "whsec_" secret, an SMTP password) can come back in a receiver's
 * answer, an SMTP reply or curl's text, and every one of those is cut to fit a buffer. These
 * tests put the secret in every form it travels in (as configured, its base64 part, the SMTP
 * AUTH LOGIN and AUTH PLAIN encodings) at every position across a cut, and check that neither
 * the secret nor the head of a cut one survives into the message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "steps/notify.h"
#include "steps/notify_impl.h"
#include "tests/tap.h"

#define SECRET "whsec_Y2Fpcm4tdGVzdC1zZWNyZXQtZG8tbm90LWxlYWstMTIzNA=="
#define SECRET_B64 "Y2Fpcm4tdGVzdC1zZWNyZXQtZG8tbm90LWxlYWstMTIzNA=="
#define USER "cairn-user"
#define PASS "smtp-pass-do-not-leak-5678"

static cairn__notify_target *parse(const char *js)
{
    json_error_t je;
    json_t *cfg = json_loads(js, 0, &je);
    cairn__notify_target *t = NULL;
    char err[512] = "";
    if (!cfg || cairn__notify_target_parse(cfg, "notify", &t, err, sizeof err) != 0)
        diag("parse failed: %s", err);
    json_decref(cfg);
    return t;
}

static char *b64(const void *p, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

/* 0 if msg holds no piece of `secret` of `min` bytes or more (a prefix, a suffix or anything
 * between), and does not end in any prefix of it at all; else the length of what it holds. */
static size_t leaked(const char *msg, const char *secret, size_t min)
{
    size_t sl = strlen(secret), ml = strlen(msg);
    for (size_t len = sl; len >= min && len > 0; len--)
        for (size_t at = 0; at + len <= sl; at++) {
            char piece[256];
            snprintf(piece, sizeof piece, "%.*s", (int)len, secret + at);
            if (strstr(msg, piece))
                return len;
        }
    for (size_t k = sl - 1; k > 0; k--)
        if (k <= ml && memcmp(msg + ml - k, secret, k) == 0)
            return k;
    return 0;
}

static void test_scrub(const cairn__notify_target *w)
{
    char s[256];
    snprintf(s, sizeof s, "answer: %s and again %s.", SECRET, SECRET);
    cairn__notify_scrub(w, s, 0);
    ok(strcmp(s, "answer: *** and again ***.") == 0, "every whole secret starred: %s", s);
    snprintf(s, sizeof s, "key=%s;", SECRET_B64);
    cairn__notify_scrub(w, s, 0);
    ok(strcmp(s, "key=***;") == 0, "the base64 part alone starred too: %s", s);
    snprintf(s, sizeof s, "cut here: %.20s", SECRET);
    cairn__notify_scrub(w, s, 1);
    ok(strcmp(s, "cut here: ***") == 0, "cut text: the head of a cut secret starred: %s", s);
    snprintf(s, sizeof s, "cut here: w");
    cairn__notify_scrub(w, s, 1);
    ok(strcmp(s, "cut here: *") == 0, "even a 1-byte head, never lengthening the text: %s", s);
    snprintf(s, sizeof s, "whole text: %.20s", SECRET);
    cairn__notify_scrub(w, s, 0);
    ok(strncmp(s, "whole text: whsec_", 18) == 0,
       "a text known to be whole keeps its ending (no secret can go on past it)");
    char dst[24];
    snprintf(s, sizeof s, "0123456789%s", SECRET);
    cairn__notify_snip(w, dst, sizeof dst, s, 0);
    ok(strcmp(dst, "0123456789***") == 0, "snip: cut to fit, then the secret's head starred: %s",
       dst);
}

/* The final message, with the secret placed so that the cut at the message's end falls at
 * every byte of it, for each of the secret's forms. */
static void test_message_cuts(const cairn__notify_target *t, const char *what, const char *secret)
{
    size_t sl = strlen(secret), worst = 0, bad = 0;
    char msg[CAIRN__NOTIFY_MSG_MAX];
    for (size_t pad = 300; pad < 300 + 2 * 160 + sl; pad++) {
        char text[1024];
        memset(text, '.', pad);
        snprintf(text + pad, sizeof text - pad, "%s and more", secret);
        for (int text_cut = 0; text_cut < 2; text_cut++) {
            cairn__notify_error_text(t, "test", text, text_cut, msg, sizeof msg);
            size_t l = leaked(msg, secret, 6);
            if (l) {
                bad++;
                if (l > worst)
                    worst = l;
                if (bad < 3)
                    diag("pad %zu: %s", pad, msg);
            }
        }
    }
    ok(bad == 0, "%s: cut at every byte of the message's end, no piece of it left (%zu bad)", what,
       bad);
    /* and a text cut before it reached the message (a 160-byte answer snippet) */
    bad = 0;
    for (size_t pad = 0; pad < 160; pad++) {
        char snippet[161], text[400];
        memset(text, '.', pad);
        snprintf(text + pad, sizeof text - pad, "%s tail", secret);
        snprintf(snippet, sizeof snippet, "%s", text); /* cut at 160, as on_answer does */
        cairn__notify_error_text(t, "test", snippet, strlen(text) > 160, msg, sizeof msg);
        bad += leaked(msg, secret, 6) != 0;
    }
    ok(bad == 0, "%s: in a snippet cut at every byte, no piece of it left (%zu bad)", what, bad);
}

int main(void)
{
    setenv("NS_SECRET", SECRET, 1);
    setenv("NS_PASS", PASS, 1);
    cairn__notify_target *w = parse("{\"type\":\"webhook\",\"name\":\"shop\",\"url\":"
                                    "\"http://127.0.0.1:9/hook\",\"secret_env\":\"NS_SECRET\"}");
    cairn__notify_target *e =
        parse("{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://127.0.0.1:25\","
              "\"from\":\"a@example.com\",\"to\":\"b@example.com\",\"username\":\"" USER "\","
              "\"password_env\":\"NS_PASS\"}");
    ok(w && e, "a webhook and an email target parse");
    if (!w || !e)
        return tap_done();
    test_scrub(w);
    test_message_cuts(w, "webhook secret", SECRET);
    test_message_cuts(w, "its base64 part", SECRET_B64);

    char plain[64];
    size_t pn = 0;
    plain[pn++] = 0;
    memcpy(plain + pn, USER, strlen(USER)), pn += strlen(USER);
    plain[pn++] = 0;
    memcpy(plain + pn, PASS, strlen(PASS)), pn += strlen(PASS);
    char *login = b64(PASS, strlen(PASS)), *auth_plain = b64(plain, pn);
    char s[256];
    snprintf(s, sizeof s, "500 unrecognised: AUTH PLAIN %s / %s / %s", auth_plain, login, PASS);
    cairn__notify_scrub(e, s, 0);
    ok(strcmp(s, "500 unrecognised: AUTH PLAIN *** / *** / ***") == 0,
       "SMTP: the password, and its AUTH LOGIN and AUTH PLAIN encodings, starred: %s", s);
    test_message_cuts(e, "SMTP password", PASS);
    test_message_cuts(e, "SMTP AUTH PLAIN", auth_plain);
    free(login), free(auth_plain);
    cairn__notify_target_free(w);
    cairn__notify_target_free(e);
    return tap_done();
}
