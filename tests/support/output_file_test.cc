// Output paths: regular files replaced atomically (mode kept, no temporary
// left behind), everything else written in place and never replaced.
#include "support/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace loom {
namespace {

namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_output_file_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The names in the folder: no temporary may be left behind.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(OutputFile, ReplacesARegularFileKeepingItsMode) {
  const fs::path file = dir_ / "out.hlo";
  { std::ofstream(file) << "old contents, longer than the new"; }
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  ASSERT_TRUE(WriteOutputFile(file.string(), "new").ok());
  EXPECT_EQ(Read(file), "new");
  EXPECT_EQ(fs::status(file).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(Names(), (std::vector<std::string>{"out.hlo"}));
  // A new file too.
  ASSERT_TRUE(WriteOutputFile((dir_ / "fresh").string(), "x").ok());
  EXPECT_EQ(Read(dir_ / "fresh"), "x");
  EXPECT_EQ(Names(), (std::vector<std::string>{"fresh", "out.hlo"}));
}

TEST_F(OutputFile, DevNullStaysADevice) {
  ASSERT_TRUE(WriteOutputFile("/dev/null", "discarded").ok());
  EXPECT_EQ(fs::status("/dev/null").type(), fs::file_type::character);
}

TEST_F(OutputFile, APipeIsWrittenInPlace) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = Read(fifo); });
  const Status written = WriteOutputFile(fifo.string(), "through the pipe");
  reader.join();
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(received, "through the pipe");
  EXPECT_EQ(fs::symlink_status(fifo).type(), fs::file_type::fifo);
  EXPECT_EQ(Names(), (std::vector<std::string>{"pipe"}));
}

TEST_F(OutputFile, ASymbolicLinkStaysALinkAndItsTargetIsReplaced) {
  const fs::path target = dir_ / "target";
  { std::ofstream(target) << "old"; }
  const fs::path link = dir_ / "link";
  fs::create_symlink(target, link);
  ASSERT_TRUE(WriteOutputFile(link.string(), "new").ok());
  EXPECT_EQ(fs::symlink_status(link).type(), fs::file_type::symlink);
  EXPECT_EQ(Read(target), "new");
  EXPECT_EQ(Names(), (std::vector<std::string>{"link", "target"}));
}

TEST_F(OutputFile, DirectoriesAndMissingFoldersAreErrorsNamingThePath) {
  Status status = WriteOutputFile(dir_.string(), "x");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("is a directory"), std::string::npos);
  const fs::path missing = dir_ / "no" / "such" / "folder.hlo";
  status = WriteOutputFile(missing.string(), "x");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find(missing.string()), std::string::npos);
  EXPECT_TRUE(Names().empty());
}

}  // namespace
}  // namespace loom
