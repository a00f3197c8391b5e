// engine/cpu/parallel.h's ThreadTeam (the threads of a linear's block-by-block weight conversion):
// every index once a round, on the same threads every round (started once, fn(0) on the caller),
// the lowest index's exception rethrown and the team still usable after it.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/parallel.h"

namespace clef {
namespace {

using engine::cpu::ThreadTeam;

TEST(ThreadTeam, EveryIndexOnceARoundOnTheSameThreads) {
  ThreadTeam team(4);
  ASSERT_EQ(team.size(), 4);
  std::vector<std::thread::id> first(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> calls(4);
    std::vector<std::thread::id> ids(4);
    team.run([&](int i) {
      calls[i]++;
      ids[i] = std::this_thread::get_id();
    });
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(calls[i].load(), 1) << "round " << round << " index " << i;
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 4u);
    if (round == 0) first = ids;
    EXPECT_EQ(ids, first) << "round " << round << " ran on other threads";
  }
}

TEST(ThreadTeam, OneOrNoWorkerRunsOnTheCaller) {
  for (int size : {0, 1}) {
    ThreadTeam team(size);
    EXPECT_EQ(team.size(), 1);
    int calls = 0;
    const std::thread::id caller = std::this_thread::get_id();
    team.run([&](int i) {
      EXPECT_EQ(i, 0);
      EXPECT_EQ(std::this_thread::get_id(), caller);
      ++calls;
    });
    EXPECT_EQ(calls, 1);
  }
}

TEST(ThreadTeam, RethrowsTheLowestIndexAndStaysUsable) {
  ThreadTeam team(3);
  std::atomic<int> calls{0};
  try {
    team.run([&](int i) {
      calls++;
      if (i >= 1) throw std::runtime_error("index " + std::to_string(i));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 1");
  }
  EXPECT_EQ(calls.load(), 3) << "every index ran although some threw";
  calls = 0;
  EXPECT_NO_THROW(team.run([&](int) { calls++; }));
  EXPECT_EQ(calls.load(), 3);
}

}  // namespace
}  // namespace clef
