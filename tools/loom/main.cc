// `loom`: the command-line front of Loom. It only wires the libraries
// together: text -> IR -> passes -> (run | simulate) -> report.
#include <cstdio>
#include <filesystem>
#include <new>

#include "loom/command.h"

// Exit codes: 0 success; 1 the input is bad or the run failed; 2 the
// command line is bad; 3 an internal error (a bug in Loom).
constexpr int kFailed = 1;
constexpr int kUsageError = 2;
constexpr int kInternalError = 3;

int main(int argc, char** argv) {
  CLI::App app{
      "Loom: overlap the collectives of SPMD HLO programs with the matrix products they feed."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  loom::cli::AddFmtCommand(app);
  loom::cli::AddVerifyCommand(app);
  loom::cli::AddStatsCommand(app);
  loom::cli::AddOptCommand(app);
  loom::cli::AddTargetsCommand(app);
  loom::cli::AddSimulateCommand(app);
  loom::cli::AddRunCommand(app);
  loom::cli::AddCompareCommand(app);
  loom::cli::AddModelCommand(app);
  loom::cli::AddStudyCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --help-all end here too, with exit code 0.
    if (error.get_exit_code() == 0) return app.exit(error);
    std::fprintf(stderr, "loom: %s (--help lists the options)\n", error.what());
    return kUsageError;
  } catch (const loom::cli::CommandError& error) {
    // An empty message: the command already said why it fails.
    if (error.what()[0] != '\0') std::fprintf(stderr, "%s\n", error.what());
    return kFailed;
  } catch (const std::filesystem::filesystem_error& error) {
    std::fprintf(stderr, "loom: %s\n", error.what());
    return kFailed;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "loom: out of memory\n");
    return kFailed;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom: internal error: %s\n", error.what());
    return kInternalError;
  }
  return 0;
}
