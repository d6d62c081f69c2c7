/* Unit tests of the builder's confinement (kla_builder.h): the source
 * check, the bubblewrap sandbox of the compiler and its limits, the
 * trimming of its messages and the checked cache. Real compiler; the
 * sandbox tests skip() where bwrap cannot make a sandbox, and the others
 * then run with --unsafe-no-sandbox's path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_jail.h"
#include "kl_test_tmp.h"

typedef struct {
    char dir[256];
    kla_builder_t *builder;
    bool jail; /* bwrap makes sandboxes here */
} fix_t;

static fix_t F;

static int s_setup(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    F.jail = kla_jail_probe(err) == KL_OK;
    if (!F.jail) {
        fprintf(stderr, "# no sandbox (%s): sandbox tests skip\n", err);
        kla_jail_set_unsafe(true);
    }
    if (!kl_test_mkdtemp(F.dir, sizeof F.dir, "kla-build-XXXXXX"))
        return -1;
    kla_builder_config_t bc = {.workdir = F.dir, .cflags = "-O2"};
    return kla_builder_new(&F.builder, &bc, err) == KL_OK ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kla_builder_destroy(&F.builder);
    char *cmd = kl_xasprintf("rm -rf '%s'", F.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

static int s_build(const char *src, kla_build_t *bd)
{
    return kla_builder_build(F.builder, src, strlen(src), bd);
}

/* A normal build works, lands in the cache with its sum, and a second
 * build is a hit that does not run the compiler. */
static void test_build_and_hit(void **state)
{
    (void)state;
    const char *src = "#include <math.h>\n#include \"stdlib.h\"\n"
                      "double k(double x) { return sqrt(x) + abs(-2); }\n";
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t bd;
    int rc = s_build(src, &bd);
    if (rc != KL_OK)
        fprintf(stderr, "build: %s\n", bd.log);
    assert_int_equal(rc, KL_OK);
    assert_true(bd.ok);
    assert_false(bd.cache_hit);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
    struct stat st;
    assert_int_equal(lstat(bd.so_path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(st.st_mode & (S_IWGRP | S_IWOTH), 0);
    char sum[PATH_MAX + 8];
    snprintf(sum, sizeof sum, "%s.sum", bd.so_path);
    assert_int_equal(lstat(sum, &st), 0);
    assert_int_equal(st.st_size, 33);
    kla_build_t again;
    assert_int_equal(s_build(src, &again), KL_OK);
    assert_true(again.cache_hit);
    assert_string_equal(again.so_path, bd.so_path);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
}

/* Makes an executable script name in the workdir; its path into path. */
static void s_script(const char *name, const char *body, char *path, size_t n)
{
    char err[KL_ERRMSG_LEN];
    snprintf(path, n, "%s/%s", F.dir, name);
    assert_int_equal(kl_write_file(path, body, strlen(body), err), KL_OK);
    assert_int_equal(chmod(path, 0755), 0);
}

/* The bytes of a file (NUL-terminated), or NULL. */
static char *s_slurp(const char *path, size_t *len)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    size_t n = 0;
    if (kl_read_file(path, &text, &n, err) != KL_OK)
        return NULL;
    text = kl_xrealloc(text, n + 1);
    text[n] = '\0';
    if (len)
        *len = n;
    return text;
}

/* #include "/etc/shadow" is refused before compiling, naming the line,
 * in each spelling a preprocessor takes; no line of the file reaches the
 * log. */
static void test_shadow_refused(void **state)
{
    (void)state;
    static const char *const srcs[] = {
        "int a;\n#include \"/etc/shadow\"\n",
        "int a;\n#include </etc/shadow>\n",
        "int a;\n  #  /* c */ include \"/etc/shadow\"\n",
        "int a;\n#inc\\\nlude \"/etc/shadow\"\n",
        "int a;\n%:include \"/etc/shadow\"\n",
        "int a;\n#include /* a\n comment */ \"/etc/shadow\"\n",
        "#define F \"/etc/shadow\"\n#include F\n",
    };
    char *shadow = s_slurp("/etc/shadow", NULL); /* NULL unless root */
    unsigned before = kla_builder_compiles(F.builder);
    for (size_t i = 0; i < sizeof srcs / sizeof *srcs; i++) {
        kla_build_t bd;
        assert_int_equal(s_build(srcs[i], &bd), KL_ERR_COMPILE);
        assert_false(bd.ok);
        assert_non_null(strstr(bd.log, "line 2: #include"));
        if (i < 6)
            assert_non_null(strstr(bd.log, "only system headers may be "
                                           "included (no absolute paths, "
                                           "no ..)"));
        else
            assert_non_null(strstr(bd.log, "computed includes"));
        assert_null(strstr(bd.log, "root:"));
        for (char *l = shadow, *e; l && *l; l = e + 1) {
            e = strchr(l, '\n');
            if (!e)
                break;
            if (e - l >= 8) /* a line of the file, e.g. "root:*:19000:..." */
                assert_null(memmem(bd.log, strlen(bd.log), l, (size_t)(e - l)));
        }
    }
    assert_int_equal(kla_builder_compiles(F.builder), before);
    kla_build_t bd; /* the whole message, remembered as the source's */
    assert_int_equal(s_build(srcs[0], &bd), KL_ERR_COMPILE);
    assert_true(bd.cache_hit);
    assert_string_equal(bd.log, "line 2: #include \"/etc/shadow\": only "
                                "system headers may be included (no "
                                "absolute paths, no ..)");
    free(shadow);
}
/* #include "/dev/zero" (a compiler reading it would never stop) is
 * refused at once, the compiler not run. */
static void test_dev_zero_refused(void **state)
{
    (void)state;
    unsigned before = kla_builder_compiles(F.builder);
    double t0 = kl_now_s();
    kla_build_t bd;
    const char *src = "int x = 1;\n#include \"/dev/zero\"\n";
    assert_int_equal(s_build(src, &bd), KL_ERR_COMPILE);
    assert_true(kl_now_s() - t0 < 5.0);
    assert_non_null(strstr(bd.log, "line 2: #include \"/dev/zero\""));
    assert_int_equal(kla_builder_compiles(F.builder), before);
}

/* The check, case by case: what passes and what is refused, with the
 * line it names. */
static void test_check_cases(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "#include <stdio.h>\n#include \"math.h\"\n#include <sys/mman.h>\n",
        "#if defined(__has_include)\n#if __has_include(<immintrin.h>)\n"
        "#endif\n#endif\n",
        "#define S(x) #x\n#define CAT(a, b) a##b\nconst char *s = S(hi);\n",
        "const char *p = \"/etc/shadow ../x.h #include\";\n"
        "/* #include \"/etc/shadow\" */\n// #include </dev/zero>\n",
        "void f(float *c) { __asm__(\"vpdpbusd %2, %1, %0\" : \"+v\"(*c)); }\n",
        "struct s { int incr; } v = {.incr = 1};\nint g(void) { return "
        "v.incr + 1.5e+3; }\n",
        "#line 40\nint a;\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char msg[512];
        int rc = kla_builder_check(ok[i], strlen(ok[i]), msg, sizeof msg);
        if (rc != 0)
            fprintf(stderr, "ok[%zu] refused: %s\n", i, msg);
        assert_int_equal(rc, 0);
    }
    static const struct {
        const char *src, *msg;
    } bad[] = {
        {"int a;\n#include \"../x.h\"\n", "line 2: #include \"../x.h\": only"},
        {"#include <a/../../etc/passwd>\n", "line 1: #include <a/../../etc"},
        {"#include <sys/../../../etc/shadow>\n", "line 1:"},
        {"#include \"\"\n", "line 1: #include \"\""},
        {"#include_next <stdio.h>\n", "line 1: #include_next: refused"},
        {"#import <stdio.h>\n", "line 1: #import: refused"},
        {"\n\n#embed \"/etc/shadow\"\n", "line 3: #embed: refused"},
        {"#line 1 \"/etc/shadow\"\n", "line 1: #line with a file name"},
        {"# 1 \"/etc/shadow\"\n", "line 1: # 1"},
        {"#if __has_include(\"/etc/shadow\")\n#endif\n",
         "line 1: __has_include(\"/etc/shadow\")"},
        {"#define H <stdio.h>\n#if __has_include(H)\n#endif\n",
         "line 2: __has_include with a macro"},
        {"void f(void) {\n  __asm__(\".incbin \\\"/etc/passwd\\\"\");\n}\n",
         "line 2: .incbin in a string"},
        {"__asm__(\".inc\"\n\"bin \\\"/etc/passwd\\\"\");\n",
         "line 1: .incbin"},
        {"__asm__(\"\\x2eincbin \\\"/etc/passwd\\\"\");\n", "line 1: .incbin"},
        {"__asm__(\".include \\\"/etc/passwd\\\"\");\n", "line 1: .include"},
        {"__asm__(\".macro m\\n.endm\");\n", "line 1: .macro"},
        {"#define S(x) #x\n__asm__(S(.incbin \"/etc/passwd\"));\n",
         "line 2: .incbin"},
        {"?\?=include \"/etc/shadow\"\n", "line 1: trigraph"},
        {"const char *r = R\"x(/*)x\";\n", "line 1: raw string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char msg[512] = "";
        int rc =
            kla_builder_check(bad[i].src, strlen(bad[i].src), msg, sizeof msg);
        if (rc == 0 || !strstr(msg, bad[i].msg))
            fprintf(stderr, "bad[%zu]: rc %d, \"%s\", wanted \"%s\"\n", i, rc,
                    msg, bad[i].msg);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(msg, bad[i].msg));
    }
}

/* __asm__(".incbin \"/etc/passwd\"") would put the file in the library
 * the tenant's kernel then reads: refused, nothing of it in the log. */
static void test_incbin_refused(void **state)
{
    (void)state;
    const char *src = "__asm__(\".section .rodata\\n.incbin "
                      "\\\"/etc/passwd\\\"\\n.previous\");\n"
                      "int k(void) { return 0; }\n";
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t bd;
    assert_int_equal(s_build(src, &bd), KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "line 1: .incbin in a string: the "
                                   "assembler may not read files"));
    assert_null(strstr(bd.log, "root:"));
    assert_int_equal(kla_builder_compiles(F.builder), before);
}

/* A 600-byte macro bomb (4^16 initialisers) is stopped by the memory
 * limit, the CPU limit or the timeout, in bounded time; the builder goes
 * on building. */
static void test_macro_bomb(void **state)
{
    (void)state;
    kl_buf_t src = {0};
    kl_buf_puts(&src, "#define A0 1,1,1,1\n");
    for (int i = 1; i <= 16; i++)
        kl_buf_printf(&src, "#define A%d A%d,A%d,A%d,A%d\n", i, i - 1, i - 1,
                      i - 1, i - 1);
    kl_buf_puts(&src, "int bomb[] = {A16};\n");
    assert_true(src.len < 700);
    char err[KL_ERRMSG_LEN];
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir,
                               .cflags = "-O0",
                               .timeout_ms = 8000,
                               .max_mem_bytes = 768u << 20};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    double t0 = kl_now_s();
    kla_build_t bd;
    assert_int_equal(kla_builder_build(b, src.data, src.len, &bd),
                     KL_ERR_COMPILE);
    double took = kl_now_s() - t0;
    fprintf(stderr, "# macro bomb stopped after %.1f s: %.200s\n", took,
            bd.log);
    assert_true(took < 60.0); /* a hang bound: 8 s timeout, CPU 10 s */
    assert_true(strstr(bd.log, "memory") || strstr(bd.log, "killed") ||
                strstr(bd.log, "still running") || strstr(bd.log, "CPU time"));
    assert_int_equal(kla_builder_compiles(b), 1);
    const char *fine = "int fine(void) { return 3; }\n";
    assert_int_equal(kla_builder_build(b, fine, strlen(fine), &bd), KL_OK);
    kla_builder_destroy(&b);
    kl_buf_free(&src);
}

/* An error in the candidate's own source keeps its message, with the
 * line, under the name candidate.c; the sandbox's paths do not show. */
static void test_own_error_kept(void **state)
{
    (void)state;
    const char *src = "int f(int x) {\n"
                      "  int y = x;\n"
                      "  return y + nope;\n"
                      "}\n";
    kla_build_t bd;
    assert_int_equal(s_build(src, &bd), KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "candidate.c:3:"));
    assert_non_null(strstr(bd.log, "'nope' undeclared"));
    assert_non_null(strstr(bd.log, "return y + nope;"));
    assert_null(strstr(bd.log, "/build/"));
    assert_null(strstr(bd.log, "/proc/self"));
    assert_null(strstr(bd.log, F.dir));
    assert_null(strstr(bd.log, "omitted"));
}

/* A declaration that clashes with a system header: the candidate's error
 * stays, the header's note (which quotes the header) goes, counted. */
static void test_other_files_omitted(void **state)
{
    (void)state;
    const char *src = "#include <stdio.h>\n"
                      "double printf(double x) { return x; }\n";
    kla_build_t bd;
    assert_int_equal(s_build(src, &bd), KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "candidate.c:2:"));
    assert_non_null(strstr(bd.log, "conflicting types for 'printf'"));
    assert_null(strstr(bd.log, "/usr/include"));
    assert_null(strstr(bd.log, "stdio.h:"));
    assert_non_null(strstr(bd.log, "about other files omitted)"));
}

/* kla_builder_trim on a compiler's stderr: another file's message, its
 * quoted lines and include chain go; the candidate's and the linker's
 * stay; paths are rewritten. */
static void test_trim(void **state)
{
    (void)state;
    const char *raw =
        "In file included from /build/candidate.c:1:\n"
        "/etc/shadow:1:5: error: expected ';' before ':' token\n"
        "    1 | root:$y$j9T$secret:19000:0:99999:7:::\n"
        "      |     ^\n"
        "root:$y$j9T$secret:19000:0:99999:7:::\n"
        "/build/candidate.c: In function 'f':\n"
        "/build/candidate.c:3:10: error: 'nope' undeclared\n"
        "    3 |   return nope;\n"
        "      |          ^~~~\n"
        "/usr/include/stdio.h:356:12: note: previous declaration\n"
        "  356 | extern int printf (const char *__restrict __format, ...);\n"
        "/usr/bin/ld: /build/ccX1.o: in function `f':\n"
        "/build/candidate.c:(.text+0x5): undefined reference to `g'\n"
        "collect2: error: ld returned 1 exit status\n";
    char out[KLA_BUILD_LOG_MAX + 1];
    int omitted = -1;
    size_t n = kla_builder_trim(raw, strlen(raw), "/build/candidate.c",
                                "/build/", out, sizeof out, &omitted);
    assert_int_equal(n, strlen(out));
    assert_int_equal(omitted, 2);
    assert_null(strstr(out, "secret"));
    assert_null(strstr(out, "shadow"));
    assert_null(strstr(out, "printf"));
    assert_null(strstr(out, "/build/"));
    assert_non_null(strstr(out, "candidate.c: In function 'f':\n"
                                "candidate.c:3:10: error: 'nope' "
                                "undeclared\n    3 |   return nope;\n"));
    assert_non_null(strstr(out, "/usr/bin/ld: ccX1.o: in function"));
    assert_non_null(strstr(out, "candidate.c:(.text+0x5): undefined"));
    assert_non_null(strstr(out, "collect2: error: ld returned 1"));
    assert_non_null(strstr(out, "(2 messages about other files omitted)\n"));
    /* bounded, the count kept */
    char small[64];
    kla_builder_trim(raw, strlen(raw), "/build/candidate.c", "/build/", small,
                     sizeof small, NULL);
    assert_true(strlen(small) < sizeof small);
    assert_non_null(strstr(small, "(2 messages about other files omitted)"));
}
/* The output argument of a fake compiler, in sh. */
#define S_SH_OUT                                                               \
    "out=; prev=; for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; "          \
    "prev=$a; done\n"

/* What a compile can see and touch, from inside, with a fake compiler:
 * uid 65534, no network, no /etc/shadow or /etc/passwd, none of the
 * workdir's files (a cached library neither read nor overwritten, a file
 * planted there lands in the sandbox's tmpfs only), /build holding the
 * source alone; its output still becomes the library. */
static void test_sandbox_view(void **state)
{
    (void)state;
    if (!F.jail)
        skip();
    const char *good = "int view_base(void) { return 5; }\n";
    kla_build_t base;
    assert_int_equal(s_build(good, &base), KL_OK);
    size_t before_len = 0;
    char *before = s_slurp(base.so_path, &before_len);
    assert_non_null(before);
    char *body =
        kl_xasprintf("#!/bin/sh\n" S_SH_OUT "echo \"spy uid=$(id -u)\" >&2\n"
                     "[ -r /etc/shadow ] && echo spy shadow=readable >&2 || "
                     "echo spy shadow=absent >&2\n"
                     "[ -e /etc/passwd ] && echo spy passwd=visible >&2 || "
                     "echo spy passwd=absent >&2\n"
                     "cat %s >/dev/null 2>&1 && echo spy cache=readable >&2 || "
                     "echo spy cache=absent >&2\n"
                     "echo \"spy workdir=$(ls %s | tr '\\n' ' ')\" >&2\n"
                     "echo planted > %s 2>/dev/null; echo planted > %s/planted "
                     "2>/dev/null\n"
                     "echo \"spy netifs=$(grep -c : /proc/net/dev)\" >&2\n"
                     "echo \"spy build=$(ls /build | tr '\\n' ' ')\" >&2\n"
                     "printf spy-output > \"$out\"\n",
                     base.so_path, F.dir, base.so_path, F.dir);
    char cc[300], err[KL_ERRMSG_LEN];
    s_script("spy-cc.sh", body, cc, sizeof cc);
    free(body);
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir, .cc = cc};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    kla_build_t bd;
    const char *src = "int spied(void) { return 1; }\n";
    int rc = kla_builder_build(b, src, strlen(src), &bd);
    fprintf(stderr, "# %s", bd.log);
    assert_int_equal(rc, KL_OK);
    assert_non_null(strstr(bd.log, "spy uid=65534\n"));
    assert_non_null(strstr(bd.log, "spy shadow=absent\n"));
    assert_non_null(strstr(bd.log, "spy passwd=absent\n"));
    assert_non_null(strstr(bd.log, "spy cache=absent\n"));
    assert_non_null(strstr(bd.log, "spy netifs=1\n")); /* lo alone */
    assert_non_null(strstr(bd.log, "spy build=candidate.c \n"));
    assert_non_null(strstr(bd.log, "spy workdir=spy-cc.sh \n"));
    char planted[300];
    snprintf(planted, sizeof planted, "%s/planted", F.dir);
    assert_int_equal(access(planted, F_OK), -1);
    size_t after_len = 0;
    char *after = s_slurp(base.so_path, &after_len);
    assert_non_null(after);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    char *lib = s_slurp(bd.so_path, NULL);
    assert_non_null(lib);
    assert_string_equal(lib, "spy-output");
    free(lib);
    free(after);
    free(before);
    kla_builder_destroy(&b);
}

/* A compile of the real compiler inside the sandbox that tries a file
 * above its directory is refused before it runs; the same source with a
 * system header builds. */
static void test_parent_include_refused(void **state)
{
    (void)state;
    if (!F.jail)
        skip();
    char path[300], err[KL_ERRMSG_LEN];
    snprintf(path, sizeof path, "%s/x.h", F.dir);
    const char *hdr = "#define SECRET 42\n";
    assert_int_equal(kl_write_file(path, hdr, strlen(hdr), err), KL_OK);
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t bd;
    const char *bad = "#include \"../x.h\"\nint s(void) { return SECRET; }\n";
    assert_int_equal(s_build(bad, &bd), KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "line 1: #include \"../x.h\": only system "
                                   "headers may be included"));
    assert_int_equal(kla_builder_compiles(F.builder), before);
    /* "x.h" alone is allowed, and the compiler, inside, cannot find it */
    const char *near = "#include \"x.h\"\nint s(void) { return SECRET; }\n";
    assert_int_equal(s_build(near, &bd), KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "x.h: No such file or directory"));
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
    unlink(path);
}

/* A cached library changed after its build is found on the next build of
 * the same source (its bytes no longer match the recorded sum) and built
 * again; a library without its sum file, left by an earlier agent, is
 * not trusted either; one with a matching sum is a hit across builders. */
static void test_tampered_cache(void **state)
{
    (void)state;
    const char *src = "int tamper(void) { return 11; }\n";
    kla_build_t bd;
    assert_int_equal(s_build(src, &bd), KL_OK);
    size_t real_len = 0;
    char *real = s_slurp(bd.so_path, &real_len);
    assert_non_null(real);
    char err[KL_ERRMSG_LEN];
    const char *evil = "\177ELF planted by another tenant";
    assert_int_equal(kl_write_file(bd.so_path, evil, strlen(evil), err), KL_OK);
    assert_int_equal(chmod(bd.so_path, 0755), 0);
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t again;
    assert_int_equal(s_build(src, &again), KL_OK);
    assert_false(again.cache_hit);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
    size_t now_len = 0;
    char *now = s_slurp(again.so_path, &now_len);
    assert_non_null(now);
    assert_int_equal(now_len, real_len);
    assert_memory_equal(now, real, real_len);
    free(now);
    /* an earlier agent's library, its sum intact: a hit */
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir, .cflags = "-O2"};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    assert_int_equal(kla_builder_build(b, src, strlen(src), &again), KL_OK);
    assert_true(again.cache_hit);
    assert_int_equal(kla_builder_compiles(b), 0);
    kla_builder_destroy(&b);
    /* its sum gone: built again */
    char sum[PATH_MAX + 8];
    snprintf(sum, sizeof sum, "%s.sum", bd.so_path);
    assert_int_equal(unlink(sum), 0);
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    assert_int_equal(kla_builder_build(b, src, strlen(src), &again), KL_OK);
    assert_false(again.cache_hit);
    assert_int_equal(kla_builder_compiles(b), 1);
    assert_int_equal(access(sum, R_OK), 0);
    /* writable by others: not used */
    assert_int_equal(chmod(bd.so_path, 0777), 0);
    assert_int_equal(kla_builder_build(b, src, strlen(src), &again), KL_OK);
    assert_false(again.cache_hit);
    assert_int_equal(kla_builder_compiles(b), 2);
    now = s_slurp(again.so_path, &now_len);
    assert_non_null(now);
    assert_memory_equal(now, real, real_len);
    free(now);
    kla_builder_destroy(&b);
    free(real);
}

/* Without the sandbox (--unsafe-no-sandbox) the compiler writes a file of
 * the per-compile directory: one that is a symbolic link is refused (it
 * could name any file of the agent's), and the directory goes. */
static void test_unsafe_symlink_output(void **state)
{
    (void)state;
    char cc[300], err[KL_ERRMSG_LEN];
    s_script("link-cc.sh",
             "#!/bin/sh\n" S_SH_OUT "ln -s /etc/passwd \"$out\"\n", cc,
             sizeof cc);
    bool unsafe = kla_jail_unsafe();
    kla_jail_set_unsafe(true);
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir, .cc = cc};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    kla_build_t bd;
    const char *src = "int linked(void) { return 1; }\n";
    int rc = kla_builder_build(b, src, strlen(src), &bd);
    kla_jail_set_unsafe(unsafe);
    assert_int_equal(rc, KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "symbolic link: refused"));
    assert_int_equal(access(bd.so_path, F_OK), -1);
    char *ls = kl_xasprintf("ls -d '%s'/build-* 2>/dev/null", F.dir);
    assert_int_not_equal(system(ls), 0); /* no per-compile dir left */
    free(ls);
    kla_builder_destroy(&b);
}

/* The state letter of the first process whose command line holds
 * marker, or 0. */
static char s_proc_state(const char *marker)
{
    DIR *d = opendir("/proc");
    char st = 0;
    struct dirent *de;
    while (d && !st && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/cmdline", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            buf[i] = buf[i] ? buf[i] : ' ';
        buf[n] = '\0';
        if (!strstr(buf, marker))
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *e = strrchr(buf, ')'); /* "PID (COMM) STATE ..." */
        if (e && e[1] == ' ')
            st = e[2];
    }
    if (d)
        closedir(d);
    return st;
}

typedef struct {
    kla_builder_t *b;
    int rc;
    kla_build_t out;
} s_bg_t;

static void *s_bg(void *arg)
{
    s_bg_t *j = arg;
    const char *src = "int gated_jail(void) { return 2; }\n";
    j->rc = kla_builder_build(j->b, src, strlen(src), &j->out);
    return NULL;
}

/* The gate stops a compiler inside its sandbox (bwrap keeps the process
 * group, so SIGSTOP reaches the compiler in the sandbox's pid namespace)
 * and lets it go on. */
static void test_gate_stops_sandboxed_compile(void **state)
{
    (void)state;
    if (!F.jail)
        skip();
    char cc[300], err[KL_ERRMSG_LEN];
    s_script("loop-cc.sh", "#!/bin/sh\nwhile :; do i=$((i+1)); done\n", cc,
             sizeof cc);
    char marker[320]; /* the shell running it, not bwrap's line */
    snprintf(marker, sizeof marker, "/bin/sh %s", cc);
    kla_gate_t *gate = NULL;
    kla_gate_new(&gate);
    s_bg_t job = {0};
    kla_builder_config_t bc = {
        .workdir = F.dir, .cc = cc, .gate = gate, .timeout_ms = 3000};
    assert_int_equal(kla_builder_new(&job.b, &bc, err), KL_OK);
    pthread_t t;
    pthread_create(&t, NULL, s_bg, &job);
    double t0 = kl_now_s();
    char st = 0;
    while ((st = s_proc_state(marker)) != 'R' && kl_now_s() - t0 < 20)
        usleep(20 * 1000);
    assert_int_equal(st, 'R'); /* it runs, inside */
    kla_gate_pause(gate);
    double p0 = kl_now_s();
    while ((st = s_proc_state(marker)) != 'T' && kl_now_s() - p0 < 5)
        usleep(20 * 1000);
    assert_int_equal(st, 'T');
    usleep(300 * 1000);
    assert_int_equal(s_proc_state(marker), 'T');
    kla_gate_resume(gate);
    p0 = kl_now_s();
    while ((st = s_proc_state(marker)) == 'T' && kl_now_s() - p0 < 5)
        usleep(20 * 1000);
    assert_int_not_equal(st, 'T');
    pthread_join(t, NULL);
    assert_int_equal(job.rc, KL_ERR_COMPILE);
    assert_non_null(strstr(job.out.log, "still running after 3.0 s"));
    assert_true(job.out.paused_s >= 0.3);
    /* killed with its sandbox: nothing of it is left */
    p0 = kl_now_s();
    while (s_proc_state(marker) && kl_now_s() - p0 < 10)
        usleep(20 * 1000);
    assert_int_equal(s_proc_state(marker), 0);
    kla_builder_destroy(&job.b);
    kla_gate_destroy(&gate);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_and_hit),
        cmocka_unit_test(test_shadow_refused),
        cmocka_unit_test(test_dev_zero_refused),
        cmocka_unit_test(test_check_cases),
        cmocka_unit_test(test_incbin_refused),
        cmocka_unit_test(test_macro_bomb),
        cmocka_unit_test(test_own_error_kept),
        cmocka_unit_test(test_other_files_omitted),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_sandbox_view),
        cmocka_unit_test(test_parent_include_refused),
        cmocka_unit_test(test_tampered_cache),
        cmocka_unit_test(test_unsafe_symlink_output),
        cmocka_unit_test(test_gate_stops_sandboxed_compile),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
