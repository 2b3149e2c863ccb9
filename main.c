/* main.c — the glm program: the engine (glm.c) and its front ends, one translation unit.

   The engine knows nothing of its front ends; each front end drives it through the Model, the
   RunState and the Generator. One translation unit keeps every function static and visible to the
   compiler at once (inlining across the seam), and keeps the build one command:
     glm.c        the engine: settings, model, kernels, attention, experts, MoE, forward, Generator
     cli.c        the command line: --help, --version, positional arguments, choosing the mode
     validate.c   REF=file: teacher forcing, greedy decoding and replay against the oracle
     text.c       tokenizer glue, TOKENIZE, TEMPLATE, PROMPT and the terminal chat
     quality.c    PPL, KLD and SCORE: perplexity, divergence from a saved run, multiple choice
     server.c     SERVE: the HTTP server, the core every API shares, OpenAI chat and completions
     api_*.c      SERVE's other APIs: Anthropic Messages, OpenAI Responses, Ollama
     web.c        SERVE: the browser page (GET /, from web/) and the engine's figures (GET /stats)
     plan.c       PLAN and DOCTOR
   Tests include glm.c alone for the engine, and a front end's file after it to test that front end
   (GLM_NO_MAIN leaves main() out). */

#include "glm.c"
#include "cli.c"     /* before plan.c: model_dir_check */
#include "validate.c"
#include "text.c"
#include "quality.c"   /* after text.c: its tokenizer glue */
#include "server.c"
#include "api_anthropic.c"
#include "api_responses.c"
#include "api_ollama.c"
#include "web.c"     /* after server.c: the page and /stats it serves */
#include "plan.c"

#ifndef GLM_NO_MAIN   /* tests and fuzz targets that include main.c leave main() out */
int main(int argc, char **argv) {
    openmp_passive_wait(argv);
    Settings set = cli_settings(argc, argv);
#ifdef _OPENMP
    if (set.threads) omp_set_num_threads(set.threads);
#endif
    g_integer_dot = set.idot;
    g_verbose = set.verbose;
    if (set.kernel != QT_KERNEL_AUTO) qt_set_kernel(set.kernel);
    if (set.prompt_from_stdin) read_stdin_prompt(&set);
    int rc;
    switch (set.mode) {
    case MODE_TOKENIZE: rc = run_tokenize(&set); break;
    case MODE_TEMPLATE: rc = run_template_only(&set); break;
    case MODE_VALIDATE: rc = run_validation(&set); break;
    case MODE_SERVE: rc = run_serve(&set); break;
    case MODE_PLAN: rc = run_plan(&set); break;
    case MODE_DOCTOR: rc = run_doctor(&set); break;
    case MODE_QUALITY: rc = run_quality(&set); break;
    default: rc = run_text(set); break;
    }
    free(set.stdin_prompt);
    return rc;
}
#endif /* GLM_NO_MAIN */
