/*
 * cmd_npz.c — `attn npz`: numpy's .npz archives (attn_npz.h), the format of
 * attn model trace's caches.
 *
 *   attn npz list FILE.npz                  each array: name, dtype, shape, bytes, stored or deflated
 *   attn npz get FILE.npz NAME -o OUT.npy   one array out, the others not read
 */
#include "cli.h"

#include "attn_npz.h"

#include <string.h>

static void npz_help(FILE *out) {
    fprintf(out,
    "usage: attn npz list FILE.npz\n"
    "       attn npz get FILE.npz NAME -o OUT.npy\n\n"
    "numpy's .npz archives (np.savez, np.savez_compressed; attn model trace --hooks writes them).\n"
    "  list   every array: its name (np.load(FILE)[NAME]), dtype, shape, bytes, stored or deflated;\n"
    "         only each member's header is read (inflated), whatever its size\n"
    "  get    one array into a .npy file; only that member is read and inflated, a chunk at a time\n"
    "         (memory stays small whatever its size), its CRC-32 checked as it streams.\n\n"
    "exit status: 0 success, 1 the archive cannot be read, 2 usage error\n\n"
    "example:\n"
    "  attn npz get cache.npz blocks.3.attn.hook_pattern -o pattern3.npy\n");
}

enum { F_OUT = 1 };
static const cli_flag npz_flags[] = {{"-o", "OUT.npy", F_OUT, 0}, CLI_FLAGS_END};
static const cli_flag *const npz_tables[] = {npz_flags, NULL};
const cli_spec cli_npz_spec = {"npz", npz_tables, npz_help, true};

static int npz_list(const char *path) {
    attn_npz *z;
    if (attn_npz_open(path, &z)) return cli_data_error("npz", "%s", attn_last_error());
    int rc = CLI_OK;
    printf("%-44s %-8s %-20s %12s  %s\n", "name", "dtype", "shape", "bytes", "stored as");
    for (int64_t i = 0; i < attn_npz_count(z); i++) {
        attn_npz_member m;
        attn_array a = {0};
        char shape[128];
        /* The shape is in the member's .npy header: only that is read. */
        if (attn_npz_member_at(z, i, &m) || attn_npz_read_header(z, m.name, &a)) {
            rc = cli_data_error("npz", "%s", attn_last_error());
            break;
        }
        printf("%-44s %-8s %-20s %12llu  %s (%llu bytes)\n", m.name, attn_dtype_name(a.dtype),
               cli_shape_str(&a, shape, sizeof shape), (unsigned long long)m.size,
               m.deflated ? "deflated" : "stored", (unsigned long long)m.stored_size);
    }
    attn_npz_free(z);
    return rc;
}

static int npz_get(const char *path, const char *name, const char *out) {
    attn_npz *z;
    if (attn_npz_open(path, &z)) return cli_data_error("npz", "%s", attn_last_error());
    int rc = CLI_OK;
    if (attn_npz_extract(z, name, out)) rc = cli_data_error("npz", "%s", attn_last_error());
    attn_npz_free(z);
    return rc;
}

int cmd_npz(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *out = NULL;
    int n = 0;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_npz_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        if (id == CLI_ARGS_POSITIONAL) {
            if (n == 3) return cli_usage_error("npz", "unexpected argument '%s'", value);
            pos[n++] = value;
        } else if (id == F_OUT) {
            out = value;
        }
    }
    if (!pos[0]) return cli_usage_error("npz", "no action: give 'list FILE.npz' or 'get FILE.npz NAME -o OUT.npy'");
    if (strcmp(pos[0], "list") == 0) {
        if (!pos[1] || pos[2] || out) return cli_usage_error("npz", "list takes one FILE.npz and no -o");
        return npz_list(pos[1]);
    }
    if (strcmp(pos[0], "get") == 0) {
        if (!pos[1] || !pos[2] || !out) return cli_usage_error("npz", "get needs FILE.npz NAME -o OUT.npy");
        const char *ins[] = {pos[1]}, *outs[] = {out};
        const int rc = cli_check_paths("npz", ins, 1, outs, 1);
        return rc ? rc : npz_get(pos[1], pos[2], out);
    }
    return cli_usage_error("npz", "unknown action '%s': the actions are list and get", pos[0]);
}
