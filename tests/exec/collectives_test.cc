// Collectives on N in-process devices (threads), N in {1,2,3,4,5,6,8}: the
// checks of collective_checks.h (whole world and sub-groups, transposed iota
// groups, element counts including 0) on every device, plus the failure of
// one device releasing the others.
#include <gtest/gtest.h>

#include <thread>

#include "exec/collective_checks.h"
#include "exec/comm/inprocess_communicator.h"

namespace loom::exec {
namespace {

using testing::InputOf;

template <typename Body>
void RunOnThreads(int64_t n, Body body) {
  auto world = InProcessWorld::Create(n, std::chrono::milliseconds(10000));
  std::vector<std::thread> threads;
  for (int64_t d = 0; d < n; ++d) {
    threads.emplace_back([&, d] {
      std::unique_ptr<Communicator> comm = world->Connect(d);
      body(d, *comm);
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST(CollectivesTest, EveryCheckOnEveryWorldSize) {
  for (int64_t n : {1, 2, 3, 4, 5, 6, 8}) {
    std::mutex mutex;
    std::vector<std::string> failures;
    int checks = 0;
    RunOnThreads(n, [&](int64_t, Communicator& comm) {
      int mine = 0;
      std::vector<std::string> found = testing::RunCollectiveChecks(comm, &mine);
      std::lock_guard lock(mutex);
      checks += mine;
      failures.insert(failures.end(), found.begin(), found.end());
    });
    EXPECT_TRUE(failures.empty()) << "n=" << n << ": " << failures.front();
    EXPECT_GE(checks, n * 8);
  }
}

TEST(CollectivesTest, SliceAndConcatenateAreInverse) {
  const Tensor whole = InputOf(3, ir::Shape(ir::PrimitiveType::kF32, {2, 6, 5}));
  std::vector<Tensor> blocks;
  for (int64_t i = 0; i < 3; ++i) blocks.push_back(SliceBlock(whole, 1, i, 3).value());
  EXPECT_EQ(blocks[1].shape().dims(), (std::vector<int64_t>{2, 2, 5}));
  // Block 1 of dimension 1 starts at row 2: element (0,2,0) = 3000 + 10.
  EXPECT_EQ(blocks[1].GetDouble(0), 3010.0);
  EXPECT_TRUE(ConcatenateBlocks(blocks, 1)->BitwiseEqual(whole));
  EXPECT_FALSE(SliceBlock(whole, 1, 0, 4).ok());  // 6 rows do not split in 4
}

TEST(CollectivesTest, AFailingDeviceReleasesTheOthers) {
  const ir::Shape shape(ir::PrimitiveType::kF32, {2});
  std::vector<std::optional<Error>> errors(4);
  const auto start = std::chrono::steady_clock::now();
  RunOnThreads(4, [&](int64_t d, Communicator& comm) {
    if (d == 2) {  // fails before its all-gather and says so
      comm.Abort(Error{"device 2: injected failure"});
      errors[d] = Error{"device 2: injected failure"};
      return;
    }
    auto pending = StartAllGather(comm, 1, {0, 1, 2, 3}, InputOf(d, shape), 0);
    Expected<Tensor> result = pending.ok() ? (*pending)->Finish() : pending.error();
    if (!result.ok()) errors[d] = result.error();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int64_t d = 0; d < 4; ++d) {
    ASSERT_TRUE(errors[d].has_value()) << d;
    EXPECT_EQ(errors[d]->message, "device 2: injected failure");
  }
}

TEST(CollectivesTest, AWaitThatNobodyAnswersTimesOut) {
  auto world = InProcessWorld::Create(2, std::chrono::milliseconds(100));
  std::unique_ptr<Communicator> comm = world->Connect(0);
  RequestId recv = comm->StartRecv(1, 0, 4).value();
  Expected<Bytes> data = comm->Wait(recv);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.error().message.find("timed out"), std::string::npos) << data.error().message;
}

}  // namespace
}  // namespace loom::exec
