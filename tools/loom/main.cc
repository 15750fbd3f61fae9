// `loom`: the command-line front of Loom. It only wires the libraries
// together: text -> IR -> passes -> (run | simulate) -> report.
#include <cstdio>

#include "loom/command.h"

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const loom::cli::CommandError& error) {
    // An empty message: the command already said why it fails.
    if (error.what()[0] != '\0') std::fprintf(stderr, "%s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom: internal error: %s\n", error.what());
    return 2;
  }
  return 0;
}
