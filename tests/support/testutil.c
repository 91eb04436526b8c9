#define _DEFAULT_SOURCE /* wait4 */

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

void test_rng_seed(test_rng *r, uint64_t seed) { r->state = seed * 2654435761u + 0x9E3779B97F4A7C15ull; if (!r->state) r->state = 1; }

uint64_t test_rng_next(test_rng *r) {
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return r->state * 0x2545F4914F6CDD1Dull;
}

double test_rng_uniform(test_rng *r) { return (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

double test_rng_normal(test_rng *r) {
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    double u = 1.0 - test_rng_uniform(r), w = test_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

int64_t test_rng_range(test_rng *r, int64_t n) { return (int64_t)(test_rng_next(r) % (uint64_t)n); }

void test_fill_normal(test_rng *r, float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * test_rng_normal(r));
}

float *test_random_floats(test_rng *r, int64_t n, double scale) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    test_fill_normal(r, x, n, scale);
    return x;
}

float *test_nan_filled(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t e = 0; e < n; e++) x[e] = NAN;
    return x;
}

static char tmpdir_buf[256];

const char *test_tmpdir(void) {
    if (!tmpdir_buf[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s/attn-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir_buf)) { perror("mkdtemp"); abort(); }
    }
    return tmpdir_buf;
}

const char *test_path(const char *name) {
    static char bufs[64][512];
    static int next;
    char *b = bufs[next++ % 64];
    snprintf(b, 512, "%s/%s", test_tmpdir(), name);
    return b;
}

void test_tmpdir_cleanup(void) {
    if (!tmpdir_buf[0]) return;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_buf);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir_buf);
    tmpdir_buf[0] = 0;
}

int test_group_teardown(void **state) {
    (void)state;
    test_tmpdir_cleanup();
    return 0;
}

int test_run_cli(char **output, const char *fmt, ...) {
    char args[8192], cmd[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", ATTN_CLI_PATH, args);
    FILE *f = popen(cmd, "r");
    if (!f) { perror("popen"); abort(); }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(f);
    if (output) *output = buf; else free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

void test_cli_expect(int want_status, const char *needle, const char *fmt, ...) {
    char args[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out;
    const int status = test_run_cli(&out, "%s", args);
    if (status != want_status || !strstr(out, needle))
        fail_msg("attn %s: exit %d (want %d), output:\n%s\n(want it to mention \"%s\")", args, status, want_status,
                 out, needle);
    free(out);
}

double test_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the launcher: a process forked while the test is small, which forks
 * and execs the children asked of it and reports how each ended.  A child
 * forked by the test itself starts with the test's resident pages as its
 * own, and wait4's ru_maxrss keeps the larger of those and what the
 * program used; forked from the launcher, it starts with the launcher's
 * few.  Messages are packets on a socket pair: a request is the log path
 * and argv, NUL-separated; a reply says a child started or ended. */
enum { LAUNCH_REQUEST_MAX = 16384, LAUNCH_ENDED_MAX = 256 };
typedef struct launch_reply { int ended, pid, wait_status; long maxrss_kb; } launch_reply;
static int launcher = -1;
static launch_reply ended[LAUNCH_ENDED_MAX];
static int n_ended;

/* Stdin from /dev/null, stdout and stderr to log, then exec. */
static void exec_child(const char *log_path, int log, char *const *argv, void (*setup)(void *), void *arg) {
    if (log < 0) log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    if (setup) setup(arg);
    execv(argv[0], argv);
    _exit(127);
}

static void launcher_loop(int sock) {
    static char request[LAUNCH_REQUEST_MAX];
    for (;;) {
        struct pollfd p = {sock, POLLIN, 0};
        int ready = poll(&p, 1, 1);
        int st;
        struct rusage ru;
        for (pid_t pid; (pid = wait4(-1, &st, WNOHANG, &ru)) > 0;) {
            launch_reply r = {1, (int)pid, st, ru.ru_maxrss};
            if (send(sock, &r, sizeof r, 0) != (ssize_t)sizeof r) _exit(1);
        }
        if (ready <= 0) continue;
        ssize_t n = recv(sock, request, sizeof request - 2, 0);
        if (n <= 0) _exit(0); /* the test is gone */
        request[n] = request[n + 1] = 0;
        char *argv[64];
        int argc = 0;
        char *log_path = request;
        for (char *a = log_path + strlen(log_path) + 1; *a && argc < 63; a += strlen(a) + 1) argv[argc++] = a;
        argv[argc] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
            close(sock);
            exec_child(log_path, -1, argv, NULL, NULL);
        }
        launch_reply r = {0, (int)pid, 0, 0};
        if (send(sock, &r, sizeof r, 0) != (ssize_t)sizeof r) _exit(1);
    }
}

void test_launcher_start(void) {
    if (launcher >= 0) return;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) { perror("socketpair"); abort(); }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); abort(); }
    if (pid == 0) {
        close(pair[0]);
        launcher_loop(pair[1]);
    }
    close(pair[1]);
    launcher = pair[0];
}

/* Receives one reply (waiting for it if block); an ended child's is kept
 * for test_child_poll.  Returns the reply's kind, or -1 if none came. */
static int launcher_receive(bool block, launch_reply *r) {
    ssize_t n = recv(launcher, r, sizeof *r, block ? 0 : MSG_DONTWAIT);
    if (n != (ssize_t)sizeof *r) {
        if (!block && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
        fprintf(stderr, "the test's launcher is gone\n");
        abort();
    }
    if (r->ended) {
        if (n_ended == LAUNCH_ENDED_MAX) { fprintf(stderr, "too many children ended unseen\n"); abort(); }
        ended[n_ended++] = *r;
    }
    return r->ended;
}

void test_child_start(test_child *c, const char *const *argv, void (*setup)(void *), void *arg) {
    static int next;
    memset(c, 0, sizeof *c);
    c->status = -1;
    snprintf(c->log, sizeof c->log, "%s/child-%d-%d.out", test_tmpdir(), (int)getpid(), next++);
    c->started = test_now();
    if (launcher >= 0 && !setup) {
        char request[LAUNCH_REQUEST_MAX];
        size_t n = 0;
        for (int i = -1; i < 0 || argv[i]; i++) {
            const char *text = i < 0 ? c->log : argv[i];
            size_t len = strlen(text) + 1;
            if (n + len + 1 > sizeof request) { fprintf(stderr, "arguments too long\n"); abort(); }
            memcpy(request + n, text, len);
            n += len;
        }
        if (send(launcher, request, n, 0) != (ssize_t)n) { perror("send"); abort(); }
        launch_reply r;
        while (launcher_receive(true, &r) != 0) continue;
        if (r.pid < 0) { fprintf(stderr, "the launcher could not fork\n"); abort(); }
        c->pid = r.pid;
        c->launched = 1;
        return;
    }
    int log = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log < 0) { perror(c->log); abort(); }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); abort(); }
    if (pid == 0) exec_child(c->log, log, (char *const *)argv, setup, arg);
    close(log);
    c->pid = (int)pid;
}

/* Fills in what an ended child left: status, peak memory, output. */
static void child_ended(test_child *c, int st, long maxrss_kb) {
    c->seconds = test_now() - c->started;
    c->maxrss_kb = maxrss_kb;
    c->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
    size_t size;
    c->output = test_read_file(c->log, &size);
    if (!c->output) c->output = strdup("");
    unlink(c->log);
}

int test_child_poll(test_child *c) {
    if (c->output) return 1;
    if (c->launched) {
        launch_reply r;
        while (launcher_receive(false, &r) >= 0) continue;
        for (int i = 0; i < n_ended; i++)
            if (ended[i].pid == c->pid) {
                child_ended(c, ended[i].wait_status, ended[i].maxrss_kb);
                ended[i] = ended[--n_ended];
                return 1;
            }
        return 0;
    }
    int st;
    struct rusage ru;
    if (wait4((pid_t)c->pid, &st, WNOHANG, &ru) == (pid_t)c->pid) {
        child_ended(c, st, ru.ru_maxrss);
        return 1;
    }
    return 0;
}

void test_child_finish(test_child *c, double timeout_s) {
    const struct timespec tick = {0, 1000 * 1000};
    while (!test_child_poll(c)) {
        if (test_now() - c->started > timeout_s && !c->timed_out) {
            c->timed_out = 1;
            kill((pid_t)c->pid, SIGKILL);
        }
        nanosleep(&tick, NULL);
    }
}

void test_child_free(test_child *c) {
    free(c->output);
    c->output = NULL;
}

void test_child_run_cli(test_child *c, const char *const *args, double timeout_s, void (*setup)(void *),
                        void *arg) {
    const char *argv[64];
    int n = 0;
    argv[n++] = ATTN_CLI_PATH;
    while (args[n - 1] && n < 63) { argv[n] = args[n - 1]; n++; }
    argv[n] = NULL;
    test_child_start(c, argv, setup, arg);
    test_child_finish(c, timeout_s);
}

void test_suppress_picture_leaks_in_children(void) {
    const char *path = test_path("lsan-pictures.supp");
    if (test_write_file(path, TEST_PICTURE_LIBRARY_LEAKS, strlen(TEST_PICTURE_LIBRARY_LEAKS)) != 0) return;
    char options[1024];
    const char *old = getenv("LSAN_OPTIONS");
    snprintf(options, sizeof options, "%s%ssuppressions=%s:print_suppressions=0", old ? old : "", old ? ":" : "", path);
    setenv("LSAN_OPTIONS", options, 1);
}

int test_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && w == size) ? 0 : -1;
}

void *test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    if (size) *size = got;
    return buf;
}

int test_file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

int test_temp_files_in(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

void test_make_socket(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof addr.sun_path);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    close(fd);
}

static int row_failures;

void test_row_failed(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    print_error("%s\n", line);
    row_failures++;
}

int test_rows_failed(void) { return row_failures; }

void test_assert_no_row_failed(void) {
    int n = row_failures;
    row_failures = 0;
    if (n) fail_msg("%d checks failed (above)", n);
}

int test_cli_flags_in_help(const char *cmd) {
    char *list = NULL, *help = NULL;
    if (test_run_cli(&list, "%s --list-options", cmd)) fail_msg("attn %s --list-options failed:\n%s", cmd, list);
    if (test_run_cli(&help, "%s --help", cmd)) fail_msg("attn %s --help failed:\n%s", cmd, help);
    int flags = 0;
    for (char *save, *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line[strcspn(line, " ")] = '\0';
        if (!strstr(help, line)) fail_msg("attn %s --list-options has %s, which --help never shows", cmd, line);
        flags++;
    }
    free(list);
    free(help);
    return flags;
}
