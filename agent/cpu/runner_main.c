/* kiln-runner - the agent's candidate sandbox (kla_cand.h). Started by
 * kiln-agent only: `kiln-runner host [--unsafe]` inside a bubblewrap
 * sandbox with the agent's socket on fd 3; the host execs itself as
 * `kiln-runner harness` for each candidate. */
#include <stdio.h>
#include <string.h>

#include "kla_runner_exe.h"

#if defined(__SANITIZE_ADDRESS__)
/* An AddressSanitizer build (tests): LeakSanitizer's exit check clones a
 * tracer process, which the harness's seccomp filter refuses, and the
 * candidate's leaks are not kiln's. The sandbox's environment is cleared,
 * so ASAN_OPTIONS does not reach here: this is the default. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}
#endif

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "host") == 0)
        return kla_runner__host_main(argc >= 3 &&
                                     strcmp(argv[2], "--unsafe") == 0);
    if (argc == 2 && strcmp(argv[1], "harness") == 0)
        return kla_runner__harness_main();
    fprintf(stderr, "kiln-runner: started by kiln-agent only (kiln-runner "
                    "host | harness)\n");
    return 2;
}
