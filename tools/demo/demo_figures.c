/*
 * demo_figures.c — `attn demo --figures DIR`: the chapter's three figures,
 * drawn by libattn from the numbers it computes (attn_chapter_figure_write),
 * as DIR/figure1.png ... figure3.png and the same as .svg.
 */
#include "cli.h"
#include "demo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int demo_figures_dir_ready(const char *dir) {
    if (!attn_pictures_available())
        return cli_data_error("demo", "--figures: this attn was built without cairo, so it draws no pictures "
                              "(install libcairo2-dev and rebuild)");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return cli_data_error("demo", "--figures: cannot create the directory '%s': %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_data_error("demo", "--figures '%s': not a directory", dir);
    /* Writable is what a file made in it says (permissions, a read-only
     * file system, root's exemptions): one is made and removed. */
    char probe[4096];
    if ((size_t)snprintf(probe, sizeof probe, "%s/.attn-demo-XXXXXX", dir) >= sizeof probe)
        return cli_data_error("demo", "--figures: the directory name '%s' is too long", dir);
    const int fd = mkstemp(probe);
    if (fd < 0)
        return cli_data_error("demo", "--figures: cannot write in the directory '%s': %s", dir, strerror(errno));
    close(fd);
    unlink(probe);
    return CLI_OK;
}

int demo_write_figures(const char *dir, const char *lang) {
    static const char *const extensions[] = {"png", "svg"};
    for (int figure = 1; figure <= 3; figure++)
        for (size_t e = 0; e < sizeof extensions / sizeof extensions[0]; e++) {
            char path[4096];
            if ((size_t)snprintf(path, sizeof path, "%s/figure%d.%s", dir, figure, extensions[e]) >= sizeof path)
                return cli_data_error("demo", "--figures: the directory name '%s' is too long", dir);
            if (attn_chapter_figure_write(path, figure, lang) != ATTN_OK)
                return cli_data_error("demo", "--figures: %s", attn_last_error());
            printf("%s %s\n", e == 0 ? "wrote" : "     ", path);
        }
    return CLI_OK;
}
