/* bench/pipeline/ok_server.h - a 200-OK HTTP server on 127.0.0.1 in a thread of the bench's
 * own process: the webhook target of the benches' pipelines, so that a delivery costs what the
 * client side costs and nothing more (static; include once per program).
 */
#ifndef CAIRN_BENCH_OK_SERVER_H
#define CAIRN_BENCH_OK_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int ok_server_fd;

/* Answers every request 200 once its headers and body (Content-Length) are in. */
static void *ok_server_main(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(ok_server_fd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[65536];
        size_t got = 0;
        for (;;) {
            ssize_t r = read(c, buf + got, sizeof buf - 1 - got);
            if (r <= 0)
                break;
            got += (size_t)r;
            buf[got] = 0;
            char *end = strstr(buf, "\r\n\r\n");
            char *cl = strcasestr(buf, "content-length:");
            if (end && (!cl || got >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10)))
                break;
        }
        static const char ok[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        if (write(c, ok, sizeof ok - 1) < 0)
            perror("write");
        close(c);
    }
}

/* Starts it; the port, or -1. */
static int ok_server_start(void)
{
    ok_server_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (bind(ok_server_fd, (struct sockaddr *)&a, sizeof a) || listen(ok_server_fd, 64) ||
        getsockname(ok_server_fd, (struct sockaddr *)&a, &l))
        return -1;
    pthread_t t;
    pthread_create(&t, NULL, ok_server_main, NULL);
    pthread_detach(t);
    return ntohs(a.sin_port);
}

#endif
