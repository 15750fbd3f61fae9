// What the subcommands share: loading modules, writing outputs, and the
// execution flags of `run` and `compare`.
#include "loom/command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ir/parser.h"

namespace loom::cli {

std::unique_ptr<ir::Module> LoadModule(const std::string& path) {
  Expected<std::unique_ptr<ir::Module>> module = ir::ParseModuleFile(path);
  if (!module.ok()) throw CommandError(module.error().ToString(path));
  return std::move(module).value();
}

std::unique_ptr<ir::Module> LoadVerifiedModule(const std::string& path, ir::VerifyReport* report) {
  std::unique_ptr<ir::Module> module = LoadModule(path);
  Expected<ir::VerifyReport> verified = ir::VerifyModule(*module);
  if (!verified.ok()) throw CommandError(verified.error().ToString(path));
  if (report) *report = std::move(verified).value();
  return module;
}

void WriteOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) throw CommandError("cannot write " + path);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw CommandError("cannot write " + path + ": " + error.message());
}

}  // namespace loom::cli
