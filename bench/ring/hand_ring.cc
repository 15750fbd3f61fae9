// The hand-written reference for Loom's rings: MPI, OpenBLAS, and one
// communication thread per process that moves the next block while the main
// thread multiplies the block in hand. It is what a programmer would write
// for these two pairs without a compiler:
//
//   ag  (all-gather -> dot): rank r holds rows r of A (A_r: m x k) and all of
//       B (k x n) and computes A B (P m x n). The ring passes A blocks to the
//       predecessor; at step i the rank multiplies window (r + i) mod P by B
//       into block (r + i) mod P of the result while window (r + i + 1)
//       arrives from the successor.
//   rs  (dot -> reduce-scatter): rank r holds A_r (P m x k) and B_r (k x n)
//       and ends with rows r of sum_r A_r B_r. At step i it computes block
//       q = (r + i + 1) mod P of A_r B_r, adds the partial sum received from
//       its predecessor (none at step 0) and sends it to its successor,
//       while it computes the next block; after P steps block r is home.
//
// And the unsplit baselines: MPI_Allgather then one sgemm, one sgemm then
// MPI_Reduce_scatter_block.
//
// Usage: mpirun -np P hand_ring {ag|ag-native|rs|rs-native} M K N REPEATS
// Prints "median ms: X" (per rank, the median over repeats of one pair;
// the largest over ranks), as `loom run --repeat` reports it.
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// One thread that runs transfer jobs one at a time, polling MPI with short
// sleeps so that it does not take the core the sgemm runs on (Open MPI makes
// no progress unless someone calls it; a blocking call would spin).
class CommThread {
 public:
  CommThread() : thread_([this] { Loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Start(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      done_ = false;
    }
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || job_; });
        if (stop_) return;
        job = std::move(job_);
        job_ = nullptr;
      }
      job();
      {
        std::lock_guard lock(mutex_);
        done_ = true;
      }
      cv_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool done_ = true, stop_ = false;
  std::thread thread_;
};

void WaitAll(MPI_Request* requests, int count) {
  for (auto pause = std::chrono::microseconds(5);;) {
    int done = 0;
    MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

// Sends `send` to `to` and receives `recv` from `from`, on the comm thread.
void Exchange(const float* send, float* recv, int count, int to, int from) {
  MPI_Request requests[2];
  MPI_Irecv(recv, count, MPI_FLOAT, from, 0, MPI_COMM_WORLD, &requests[0]);
  MPI_Isend(send, count, MPI_FLOAT, to, 0, MPI_COMM_WORLD, &requests[1]);
  WaitAll(requests, 2);
}

void Gemm(const float* a, const float* b, float* c, int m, int n, int k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

struct Problem {
  int rank, size, m, k, n;
};

void AgRing(const Problem& p, CommThread& comm, std::vector<float>& window,
            std::vector<float>& next, const std::vector<float>& b, std::vector<float>& c) {
  const int count = p.m * p.k;
  const int left = (p.rank - 1 + p.size) % p.size, right = (p.rank + 1) % p.size;
  for (int step = 0; step < p.size; ++step) {
    if (step + 1 < p.size) {
      comm.Start([&] { Exchange(window.data(), next.data(), count, left, right); });
    }
    const int block = (p.rank + step) % p.size;
    Gemm(window.data(), b.data(), c.data() + static_cast<size_t>(block) * p.m * p.n, p.m, p.n, p.k);
    if (step + 1 < p.size) {
      comm.Wait();
      std::swap(window, next);
    }
  }
}

void AgNative(const Problem& p, const std::vector<float>& shard, std::vector<float>& gathered,
              const std::vector<float>& b, std::vector<float>& c) {
  MPI_Allgather(shard.data(), p.m * p.k, MPI_FLOAT, gathered.data(), p.m * p.k, MPI_FLOAT,
                MPI_COMM_WORLD);
  Gemm(gathered.data(), b.data(), c.data(), p.size * p.m, p.n, p.k);
}

void RsRing(const Problem& p, CommThread& comm, const std::vector<float>& a,
            const std::vector<float>& b, std::vector<float>& partial, std::vector<float>& sending,
            std::vector<float>& received, std::vector<float>& out) {
  const int count = p.m * p.n;
  const int prev = (p.rank - 1 + p.size) % p.size, next = (p.rank + 1) % p.size;
  for (int step = 0; step < p.size; ++step) {
    const int block = (p.rank + step + 1) % p.size;
    Gemm(a.data() + static_cast<size_t>(block) * p.m * p.k, b.data(), partial.data(), p.m, p.n,
         p.k);
    if (step > 0) {  // the partial sum sent last step's successor... arrived
      comm.Wait();
      for (int i = 0; i < count; ++i) partial[i] = received[i] + partial[i];
    }
    if (step + 1 == p.size) {
      std::swap(out, partial);
      break;
    }
    std::swap(sending, partial);
    comm.Start([&] { Exchange(sending.data(), received.data(), count, next, prev); });
  }
}

void RsNative(const Problem& p, const std::vector<float>& a, const std::vector<float>& b,
              std::vector<float>& full, std::vector<float>& out) {
  Gemm(a.data(), b.data(), full.data(), p.size * p.m, p.n, p.k);
  MPI_Reduce_scatter_block(full.data(), out.data(), p.m * p.n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Problem p{};
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  if (argc != 6) {
    if (p.rank == 0)
      std::fprintf(stderr, "usage: hand_ring {ag|ag-native|rs|rs-native} M K N REPEATS\n");
    MPI_Finalize();
    return 2;
  }
  const std::string mode = argv[1];
  p.m = std::atoi(argv[2]);
  p.k = std::atoi(argv[3]);
  p.n = std::atoi(argv[4]);
  const int repeats = std::max(1, std::atoi(argv[5]));
  openblas_set_num_threads(1);
  const size_t mk = static_cast<size_t>(p.m) * p.k, kn = static_cast<size_t>(p.k) * p.n,
               mn = static_cast<size_t>(p.m) * p.n;
  std::vector<float> b(kn, 0.5f), a, window(mk, 1.0f), next(mk), gathered, c, partial, sending,
      received, out(mn);
  if (mode == "ag" || mode == "ag-native") {
    c.resize(mn * p.size);
    gathered.resize(mk * p.size);
  } else {
    a.assign(mk * p.size, 0.25f);
    partial.resize(mn);
    sending.resize(mn);
    received.resize(mn);
    c.resize(mn * p.size);
  }
  CommThread comm;
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {  // the first is a warm-up
    const auto start = std::chrono::steady_clock::now();
    if (mode == "ag") {
      AgRing(p, comm, window, next, b, c);
    } else if (mode == "ag-native") {
      AgNative(p, window, gathered, b, c);
    } else if (mode == "rs") {
      RsRing(p, comm, a, b, partial, sending, received, out);
    } else if (mode == "rs-native") {
      RsNative(p, a, b, c, out);
    } else {
      if (p.rank == 0) std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2], slowest = 0;
  MPI_Reduce(&median, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (p.rank == 0) std::printf("median ms: %.2f\n", slowest);
  MPI_Finalize();
  return 0;
}
