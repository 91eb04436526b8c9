/*
 * test_outputs.c — the attn program never destroys a user's files: the
 * data-loss findings of the reliability audit (issue 15), each kept as a
 * regression test.
 *   - `attn sdpa -q q.npy -o q.npy --lse /nonexistent/x` deleted the INPUT
 *     q.npy: an output that is an input (or another output) is refused
 *     before anything is read or written;
 *   - a later output's failure deleted the earlier outputs, and with them
 *     the user's previous good files: outputs are written as a set, so a
 *     failure leaves every target as it was;
 *   - `-o /dev/stdout` printed nothing, `-o /dev/full` reported success;
 *   - an interrupted run left its .tmp files behind.
 * And the faults of the reliability issue's output list: a full device
 * (/dev/full), a full disk (a file size limit, and a small tmpfs), a
 * read-only directory (a read-only tmpfs), a path below a regular file,
 * SIGKILL, SIGINT, SIGTERM and SIGHUP in the middle of a large write.  In
 * every case a file under its final name is either what it was before,
 * byte for byte, or complete (read back and compared with the oracle).
 *
 * The tmpfs mounts live in a mount namespace of this test's own (see
 * own_mounts), so they are seen by this process and its children only and
 * vanish with it; where no namespace can be had those cases are skipped
 * with the reason printed.
 */
#define _GNU_SOURCE /* unshare, CLONE_NEWNS */

#include "cli_files.h"
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "oracle.h"
#include "tolerances.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* q, k, v of the chapter's size in the temporary directory, named qN, kN, vN. */
static void make_inputs(int64_t L, int64_t H, int64_t D) {
    const int64_t shape[3] = {L, H, D};
    float *x = malloc(sizeof(float) * (size_t)(L * H * D));
    test_rng r;
    test_rng_seed(&r, 7);
    test_fill_normal(&r, x, L * H * D, 1.0);
    test_save_f32(test_path("q.npy"), 3, shape, x);
    test_save_f32(test_path("k.npy"), 3, shape, x);
    test_save_f32(test_path("v.npy"), 3, shape, x);
    free(x);
}

/* The bytes of a file, malloc'd (fails the test if it is missing). */
static char *contents(const char *path, size_t *size) {
    char *data = test_read_file(path, size);
    if (!data) fail_msg("%s is missing", path);
    return data;
}

static void outputs_that_are_inputs_are_refused(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    char q[512];
    snprintf(q, sizeof q, "%s", test_path("q.npy"));
    size_t before_size, after_size;
    char *before = contents(q, &before_size), *out = NULL;
    /* The audit's command, which used to delete q.npy. */
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --lse /nonexistent/x.npy", q, test_path("k.npy"),
                          test_path("v.npy"), q);
    if (rc != 2 || !strstr(out, "is the input")) fail_msg("exit %d: %s", rc, out);
    free(out);
    /* The same file through a symbolic link. */
    const char *alias = test_path("alias.npy");
    assert_int_equal(symlink(q, alias), 0);
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s", q, test_path("k.npy"), test_path("v.npy"), alias);
    if (rc != 2 || !strstr(out, "is the input")) fail_msg("exit %d: %s", rc, out);
    free(out);
    char *after = contents(q, &after_size);
    assert_int_equal(before_size, after_size);
    assert_memory_equal(before, after, before_size);
    free(before);
    free(after);
    /* Two outputs naming one file would keep only the last. */
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --weights %s", q, test_path("k.npy"), test_path("v.npy"),
                      test_path("same.npy"), test_path("same.npy"));
    if (rc != 2 || !strstr(out, "two outputs name the same file")) fail_msg("exit %d: %s", rc, out);
    free(out);
    assert_false(test_file_exists(test_path("same.npy")));
    /* Devices are exempt: both to /dev/null is fine. */
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/null --weights /dev/null", q, test_path("k.npy"),
                      test_path("v.npy"));
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
}

/* A later output that fails leaves the earlier targets as they were: the
 * user's previous good o.npy survives, and no temporary file remains. */
static void a_failed_output_keeps_every_previous_file(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    const char *o = test_path("o_keep.npy");
    assert_int_equal(test_write_file(o, "a previous good result", 22), 0);
    char *out = NULL;
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --lse /nonexistent-dir/lse.npy", test_path("q.npy"),
                          test_path("k.npy"), test_path("v.npy"), o);
    if (rc != 1 || !strstr(out, "/nonexistent-dir/lse.npy")) fail_msg("exit %d: %s", rc, out);
    free(out);
    size_t size;
    char *kept = contents(o, &size);
    assert_int_equal(size, 22);
    assert_memory_equal(kept, "a previous good result", 22);
    free(kept);
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
}

/* Special targets: /dev/stdout gets the array (into a pipe or a file),
 * /dev/full an error. */
static void devices_and_standard_output(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    char *out = NULL;
    const char *piped = test_path("piped.npy"), *redirected = test_path("redirected.npy");
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/stdout | cat > %s", test_path("q.npy"),
                          test_path("k.npy"), test_path("v.npy"), piped);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/stdout > %s", test_path("q.npy"), test_path("k.npy"),
                      test_path("v.npy"), redirected);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
    const char *written[2] = {piped, redirected};
    for (int i = 0; i < 2; i++) {
        attn_array a;
        if (attn_npy_load(written[i], &a)) fail_msg("%s: %s", written[i], attn_last_error());
        assert_int_equal(a.ndim, 3);
        assert_int_equal(a.shape[0], 3);
        assert_int_equal(a.shape[2], 2);
        attn_array_free(&a);
    }
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/full", test_path("q.npy"), test_path("k.npy"),
                      test_path("v.npy"));
    if (rc != 1 || !strstr(out, "No space left on device")) fail_msg("exit %d: %s", rc, out);
    free(out);
    /* A full device as the second output: the first, complete in its
     * temporary file, is not put under its name either. */
    const char *o = test_path("o_before_full.npy");
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --weights /dev/full", test_path("q.npy"),
                      test_path("k.npy"), test_path("v.npy"), o);
    if (rc != 1 || !strstr(out, "/dev/full") || !strstr(out, "No space left on device"))
        fail_msg("exit %d: %s", rc, out);
    free(out);
    assert_false(test_file_exists(o));
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
}

/* Interrupted while writing its outputs, the program removes its
 * temporary files and leaves no target.  To catch it in the middle, the
 * second output is a FIFO whose reader never reads: the first output's
 * temporary file is complete and the second write blocks, so SIGINT (and
 * then SIGTERM) arrives at a known point. */
static void interrupted_runs_leave_no_temporary(void **state) {
    (void)state;
    make_inputs(128, 2, 8); /* weights [2, 128, 128]: 128 KiB, more than a pipe holds */
    const int signals[2] = {SIGINT, SIGTERM};
    for (int s = 0; s < 2; s++) {
        char fifo[512], o[512];
        snprintf(fifo, sizeof fifo, "%s", test_path(s ? "w_term.fifo" : "w_int.fifo"));
        snprintf(o, sizeof o, "%s", test_path(s ? "o_term.npy" : "o_int.npy"));
        assert_int_equal(mkfifo(fifo, 0600), 0);
        int reader = open(fifo, O_RDONLY | O_NONBLOCK);
        assert_true(reader >= 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 2);
            execl(ATTN_CLI_PATH, ATTN_CLI_PATH, "sdpa", "-q", test_path("q.npy"), "-k", test_path("k.npy"), "-v",
                  test_path("v.npy"), "-o", o, "--weights", fifo, (char *)NULL);
            _exit(127);
        }
        /* Wait for the first output's temporary file (5 s at the most). */
        bool seen = false;
        for (int tries = 0; tries < 500 && !seen; tries++) {
            seen = test_temp_files_in(test_tmpdir()) > 0;
            if (!seen) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        if (!seen) {
            kill(pid, SIGKILL);
            fail_msg("the run never started writing its outputs");
        }
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL); /* it is blocked on the FIFO */
        kill(pid, signals[s]);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == signals[s]);
        close(reader);
        assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
        assert_false(test_file_exists(o));
        unlink(fifo);
    }
}

/* ------------------------------------------------------- faults on output */

/* A file's content before a run, to compare with after it. */
typedef struct previous_file {
    char path[640];
    char *bytes;
    size_t size;
    ino_t inode;
} previous_file;

static void write_previous(previous_file *p, const char *path) {
    snprintf(p->path, sizeof p->path, "%s", path);
    p->size = (size_t)snprintf(NULL, 0, "the previous good %s", path);
    p->bytes = malloc(p->size + 1);
    snprintf(p->bytes, p->size + 1, "the previous good %s", path);
    assert_int_equal(test_write_file(path, p->bytes, p->size), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    p->inode = st.st_ino;
}

/* Cheaply, without reading it: is the file under p's name another now? */
static bool replaced_or_changed(const previous_file *p) {
    struct stat st;
    return stat(p->path, &st) != 0 || st.st_ino != p->inode || (size_t)st.st_size != p->size;
}

static bool holds_previous(const previous_file *p) {
    size_t size;
    char *now = test_read_file(p->path, &size);
    bool same = now && size == p->size && memcmp(now, p->bytes, size) == 0;
    free(now);
    return same;
}

static void assert_still_previous(const previous_file *p) {
    if (!holds_previous(p)) fail_msg("%s changed: it no longer holds its previous content", p->path);
}

/* The mounts made here, unmounted by unmount_all (and the group teardown). */
static char mounted[4][512];

/* A mount namespace of the test's own: as root, unshare it; otherwise a
 * user namespace too, with the user mapped to root inside.  Mounts then
 * stay private (MS_PRIVATE: none propagates back to the machine's).
 * Returns NULL, or why it cannot be had. */
static const char *own_mounts(void) {
    static int state;
    static char why[300];
    if (state) return state > 0 ? NULL : why;
    state = -1;
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWNS) != 0) {
        int as_is = errno;
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(why, sizeof why, "no mount namespace: unshare: %s; with a user namespace: %s",
                     strerror(as_is), strerror(errno));
            return why;
        }
        char map[64];
        int n = snprintf(map, sizeof map, "0 %ld 1\n", (long)uid);
        int ok = test_write_file("/proc/self/setgroups", "deny", 4) == 0 &&
                 test_write_file("/proc/self/uid_map", map, (size_t)n) == 0;
        n = snprintf(map, sizeof map, "0 %ld 1\n", (long)gid);
        if (!ok || test_write_file("/proc/self/gid_map", map, (size_t)n) != 0) {
            snprintf(why, sizeof why, "a user namespace, but its id maps cannot be written");
            return why;
        }
    }
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, sizeof why, "mount --make-rprivate /: %s", strerror(errno));
        return why;
    }
    state = 1;
    return NULL;
}

/* A tmpfs of `size` at dir (created); NULL, or why not. */
static const char *mount_tmpfs(const char *dir, const char *size) {
    const char *why = own_mounts();
    if (why) return why;
    assert_int_equal(mkdir(dir, 0755), 0);
    char options[64];
    snprintf(options, sizeof options, "size=%s,mode=0755", size);
    if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0) {
        static char err[300];
        snprintf(err, sizeof err, "mount -t tmpfs %s: %s", dir, strerror(errno));
        return err;
    }
    for (int i = 0; i < 4; i++)
        if (!mounted[i][0]) {
            snprintf(mounted[i], sizeof mounted[i], "%s", dir);
            return NULL;
        }
    fail_msg("more than 4 mounts");
    return NULL;
}

static void unmount_all(void) {
    for (int i = 0; i < 4; i++)
        if (mounted[i][0]) {
            if (umount2(mounted[i], MNT_DETACH) != 0) print_error("umount %s: %s\n", mounted[i], strerror(errno));
            rmdir(mounted[i]);
            mounted[i][0] = 0;
        }
}

static int teardown_all(void **state) {
    unmount_all();
    return test_group_teardown(state);
}

/* Runs `attn sdpa -q q -k k -v v -o o --weights w` (inputs of make_inputs)
 * to its end, with setup in the child before exec. */
static void run_sdpa_to(test_child *c, const char *o, const char *w, void (*setup)(void *), void *arg) {
    const char *args[] = {"sdpa", "-q", test_path("q.npy"), "-k", test_path("k.npy"), "-v", test_path("v.npy"),
                          "-o", o, "--weights", w, NULL};
    test_child_run_cli(c, args, 60, setup, arg);
}

/* A run whose outputs cannot be written: exit 1, a message with the file
 * and the reason, and every target as it was (o previous, w absent or
 * previous), no temporary file in dir. */
static void assert_refused_and_unchanged(test_child *c, const char *fault_path, const char *reason,
                                         const previous_file *o, const previous_file *w, const char *w_path,
                                         const char *dir) {
    if (c->status != 1 || !strstr(c->output, fault_path) || !strstr(c->output, reason))
        fail_msg("exit %d (want 1), output \"%s\" (want '%s' and '%s')", c->status, c->output, fault_path, reason);
    if (o) assert_still_previous(o);
    if (w) assert_still_previous(w);
    else if (test_file_exists(w_path)) fail_msg("%s was created by a failed run", w_path);
    assert_int_equal(test_temp_files_in(dir), 0);
}

typedef struct file_size_limit {
    rlim_t bytes;
    bool ignore_sigxfsz; /* as the caller of the program may have set it */
} file_size_limit;

static void limit_file_size(void *arg) {
    const file_size_limit *l = arg;
    struct rlimit r = {l->bytes, l->bytes};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) _exit(126);
    signal(SIGXFSZ, l->ignore_sigxfsz ? SIG_IGN : SIG_DFL);
}

/* A full disk: writes past a file size limit fail with EFBIG (and raise
 * SIGXFSZ, which the program must not die of), and a small tmpfs fails
 * them with ENOSPC.  The weights (128 KiB) do not fit; the output (8 KiB)
 * does and is complete in its temporary file, which is removed. */
static void full_disks_change_nothing(void **state) {
    (void)state;
    make_inputs(128, 2, 8);
    for (int ignore = 0; ignore < 2; ignore++) {
        previous_file o;
        write_previous(&o, test_path("o_fsize.npy"));
        const char *w = test_path("w_fsize.npy");
        file_size_limit limit = {64 * 1024, ignore != 0};
        test_child c;
        run_sdpa_to(&c, o.path, w, limit_file_size, &limit);
        assert_refused_and_unchanged(&c, w, "File too large", &o, NULL, w, test_tmpdir());
        test_child_free(&c);
        free(o.bytes);
    }
    char disk[512];
    snprintf(disk, sizeof disk, "%s", test_path("small-disk"));
    const char *why = mount_tmpfs(disk, "64k");
    if (why) {
        print_message("the full tmpfs case is skipped: %s\n", why);
        return;
    }
    char o_path[600], w_path[600];
    snprintf(o_path, sizeof o_path, "%s/o.npy", disk);
    snprintf(w_path, sizeof w_path, "%s/w.npy", disk);
    previous_file o;
    write_previous(&o, o_path);
    test_child c;
    run_sdpa_to(&c, o_path, w_path, NULL, NULL);
    assert_refused_and_unchanged(&c, w_path, "No space left on device", &o, NULL, w_path, disk);
    test_child_free(&c);
    free(o.bytes);
    unmount_all();
}

/* A read-only directory.  As root, permissions do not stop a write, so
 * the directory is a tmpfs remounted read-only: EROFS for everyone. */
static void read_only_directories_change_nothing(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", test_path("read-only"));
    const char *why = mount_tmpfs(dir, "1m");
    if (why) {
        print_message("skipped: %s\n", why);
        skip();
    }
    char o_path[600], w_path[600];
    snprintf(o_path, sizeof o_path, "%s/o.npy", dir);
    snprintf(w_path, sizeof w_path, "%s/w.npy", dir);
    previous_file o;
    write_previous(&o, o_path);
    assert_int_equal(mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL), 0);
    assert_int_equal(open(w_path, O_WRONLY | O_CREAT, 0644), -1); /* the fault is real */
    assert_int_equal(errno, EROFS);
    /* An existing target, then a new one, in the read-only directory. */
    test_child c;
    run_sdpa_to(&c, o_path, test_path("w_ro.npy"), NULL, NULL);
    assert_refused_and_unchanged(&c, o_path, "Read-only file system", &o, NULL, test_path("w_ro.npy"), dir);
    test_child_free(&c);
    run_sdpa_to(&c, test_path("o_ro.npy"), w_path, NULL, NULL);
    assert_refused_and_unchanged(&c, w_path, "Read-only file system", NULL, NULL, w_path, dir);
    assert_false(test_file_exists(test_path("o_ro.npy")));
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
    test_child_free(&c);
    free(o.bytes);
    unmount_all();
}

/* A path below a regular file (ENOTDIR): refused, the file untouched. */
static void a_path_below_a_file_is_refused(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    previous_file parent;
    write_previous(&parent, test_path("parent.npy"));
    char below[700];
    snprintf(below, sizeof below, "%s/o.npy", parent.path);
    test_child c;
    run_sdpa_to(&c, below, test_path("w_below.npy"), NULL, NULL);
    assert_refused_and_unchanged(&c, below, "Not a directory", &parent, NULL, test_path("w_below.npy"),
                                 test_tmpdir());
    test_child_free(&c);
    free(parent.bytes);
}

/* ---- a signal in the middle of a large write.
 * q, k, v [2048, 2, 2]: weights [2, 2048, 2048], 32 MiB, written after the
 * 32 KiB output; then the output's rename, then the weights'.  The run is
 * signalled at one of these points, as the directory shows them. */
enum { BIG_L = 2048, BIG_H = 2, BIG_D = 2 };
#define BIG_WEIGHTS_BYTES (128 + (off_t)BIG_H * BIG_L * BIG_L * 4)

typedef enum write_point {
    POINT_OUTPUT_TEMP,      /* the output's temporary file exists            */
    POINT_WEIGHTS_PARTIAL,  /* the weights' is partly written                */
    POINT_WEIGHTS_WRITTEN,  /* the weights' is complete, nothing renamed yet  */
    POINT_OUTPUT_RENAMED,   /* the output is under its name, the weights not */
    N_POINTS,
    POINT_TARGET_CHANGED = N_POINTS /* seen otherwise: a target was replaced or changed */
} write_point;
static const char *const point_names[N_POINTS + 1] = {
    "the output's temporary file exists", "the weights are partly written",
    "the weights are written, nothing renamed", "the output is renamed, the weights not",
    "a target was replaced or changed"};

static float *big_q;
static double *big_out, *big_weights; /* the oracle's, computed when first needed */

static void make_big_inputs(void) {
    if (big_q) return;
    const int64_t n = (int64_t)BIG_L * BIG_H * BIG_D, shape[3] = {BIG_L, BIG_H, BIG_D};
    big_q = malloc(sizeof(float) * (size_t)n);
    test_rng r;
    test_rng_seed(&r, 15);
    test_fill_normal(&r, big_q, n, 1.0);
    test_save_f32(test_path("big_q.npy"), 3, shape, big_q);
    assert_int_equal(mkdir(test_path("big"), 0755), 0);
}

static void big_oracle(void) {
    if (big_out) return;
    oracle_case oc = {.B = 1, .L = BIG_L, .S = BIG_L, .Hq = BIG_H, .Hkv = BIG_H, .D = BIG_D, .Dv = BIG_D};
    big_out = malloc(sizeof(double) * BIG_L * BIG_H * BIG_D);
    big_weights = malloc(sizeof(double) * (size_t)BIG_H * BIG_L * BIG_L);
    oracle_attention(&oc, big_q, big_q, big_q, big_out, big_weights, NULL);
}

/* p's file holds either its previous content or the complete array the
 * oracle computes: the output [L, H, D], or the weights [H, L, S]. */
static void assert_previous_or_complete(const previous_file *p, bool weights, const char *when) {
    if (holds_previous(p)) return;
    big_oracle();
    attn_array a;
    if (attn_npy_load(p->path, &a) != ATTN_OK)
        fail_msg("%s: %s is neither its previous content nor complete: %s", when, p->path, attn_last_error());
    const int64_t n = weights ? (int64_t)BIG_H * BIG_L * BIG_L : (int64_t)BIG_L * BIG_H * BIG_D;
    assert_int_equal(a.dtype, ATTN_F32);
    assert_int_equal(a.count, n);
    const double *want = weights ? big_weights : big_out;
    double diff = max_abs_diff(want, a.data, n);
    double bound = weights ? CLI_WEIGHT_ABS_FAIL : CLI_OUT_REL_FAIL * fmax(1.0, max_abs(want, n));
    if (!(diff <= bound)) fail_msg("%s: %s is complete but wrong: max |diff| %g > %g", when, p->path, diff, bound);
    attn_array_free(&a);
}

/* Where the run stands, from big/'s entries; -1 before anything (or after
 * everything) is there to see. */
static int write_point_now(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    bool o_temp = false, w_temp = false;
    off_t w_size = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "o.npy.tmp-", 10) == 0) o_temp = true;
        if (strncmp(e->d_name, "w.npy.tmp-", 10) == 0) {
            char path[800];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            w_temp = true;
            if (stat(path, &st) == 0) w_size = st.st_size;
        }
    }
    closedir(d);
    if (w_temp && w_size == BIG_WEIGHTS_BYTES) return o_temp ? POINT_WEIGHTS_WRITTEN : POINT_OUTPUT_RENAMED;
    if (w_temp && w_size > 0) return POINT_WEIGHTS_PARTIAL;
    return o_temp || w_temp ? POINT_OUTPUT_TEMP : -1;
}

/* Removes big/'s leftover temporary files; returns how many there were. */
static int remove_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp-")) {
            char path[800];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            n += unlink(path) == 0;
        }
    closedir(d);
    return n;
}

/* Signals a run when it reaches `point` (or the first point seen past
 * it), then checks both targets; returns the point it was signalled at,
 * or -1 if it ended first.  *leftovers: temporary files it left. */
static int signal_mid_write(int sig, write_point point, int *leftovers) {
    char dir[512], o_path[600], w_path[600];
    snprintf(dir, sizeof dir, "%s", test_path("big"));
    snprintf(o_path, sizeof o_path, "%s/o.npy", dir);
    snprintf(w_path, sizeof w_path, "%s/w.npy", dir);
    previous_file o, w;
    write_previous(&o, o_path);
    write_previous(&w, w_path);
    const char *q = test_path("big_q.npy");
    const char *args[] = {ATTN_CLI_PATH, "sdpa", "-q", q, "-k", q, "-v", q, "-o", o_path, "--weights", w_path,
                          NULL};
    test_child c;
    test_child_start(&c, args, NULL, NULL);
    int signalled_at = -1;
    while (!test_child_poll(&c)) {
        int now = write_point_now(dir);
        /* A target that changes under its final name before the point is
         * seen in the directory (written in place, renamed early, or just
         * renamed since the directory was read) is signalled at once: the
         * checks below tell which. */
        if (now < (int)POINT_OUTPUT_RENAMED && (replaced_or_changed(&o) || replaced_or_changed(&w)))
            now = POINT_TARGET_CHANGED;
        if (now >= (int)point) {
            kill((pid_t)c.pid, sig);
            signalled_at = now;
            break;
        }
        if (test_now() - c.started > 60) break;
    }
    test_child_finish(&c, 60);
    char when[160];
    snprintf(when, sizeof when, "signal %d when %s", sig, signalled_at >= 0 ? point_names[signalled_at] : "it had ended");
    if (signalled_at >= 0 && c.status != 128 + sig && c.status != 0)
        fail_msg("%s: exit %d, output \"%s\"", when, c.status, c.output);
    if (signalled_at < 0 && c.status != 0) fail_msg("%s: exit %d, output \"%s\"", when, c.status, c.output);
    test_child_free(&c);
    assert_previous_or_complete(&o, false, when);
    assert_previous_or_complete(&w, true, when);
    /* The output is renamed before the weights: never the weights alone. */
    if (holds_previous(&o) && !holds_previous(&w)) fail_msg("%s: the weights were renamed before the output", when);
    *leftovers = remove_temporaries(dir);
    free(o.bytes);
    free(w.bytes);
    unlink(o_path);
    unlink(w_path);
    return signalled_at;
}

/* SIGKILL cannot be caught: its temporary files may stay behind (which is
 * why they carry the pid), but no final name ever holds a partial file. */
static void killed_mid_write_leaves_no_partial_file(void **state) {
    (void)state;
    make_big_inputs();
    int landed = 0;
    for (int p = 0; p < N_POINTS; p++) {
        int leftovers;
        int at = signal_mid_write(SIGKILL, (write_point)p, &leftovers);
        landed += at >= 0;
        print_message("SIGKILL aimed at \"%s\": sent when %s; %d temporary file(s) left behind\n", point_names[p],
                      at >= 0 ? point_names[at] : "(the run had ended)", leftovers);
    }
    if (!landed) fail_msg("no SIGKILL reached a run while it was writing: nothing was tested");
}

/* SIGINT, SIGTERM and SIGHUP are caught: the temporary files go too. */
static void interrupted_mid_write_removes_its_temporaries(void **state) {
    (void)state;
    make_big_inputs();
    const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    int landed = 0;
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < N_POINTS; p++) {
            int leftovers;
            int at = signal_mid_write(signals[s], (write_point)p, &leftovers);
            landed += at >= 0;
            if (leftovers)
                fail_msg("signal %d when %s: %d temporary file(s) left behind", signals[s],
                         at >= 0 ? point_names[at] : "it had ended", leftovers);
            if (at != p)
                print_message("signal %d aimed at \"%s\" was sent when %s\n", signals[s], point_names[p],
                              at >= 0 ? point_names[at] : "the run had ended");
        }
    if (!landed) fail_msg("no signal reached a run while it was writing: nothing was tested");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(outputs_that_are_inputs_are_refused),
        cmocka_unit_test(a_failed_output_keeps_every_previous_file),
        cmocka_unit_test(devices_and_standard_output),
        cmocka_unit_test(interrupted_runs_leave_no_temporary),
        cmocka_unit_test(full_disks_change_nothing),
        cmocka_unit_test(read_only_directories_change_nothing),
        cmocka_unit_test(a_path_below_a_file_is_refused),
        cmocka_unit_test(killed_mid_write_leaves_no_partial_file),
        cmocka_unit_test(interrupted_mid_write_removes_its_temporaries),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
