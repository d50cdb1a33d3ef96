#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>
using namespace dnnl;

template <class F>
double med(F f) {
    for (int i = 0; i < 20; i++)
        f();
    std::vector<double> v;
    for (int i = 0; i < 51; i++) {
        auto t = std::chrono::steady_clock::now();
        f();
        v.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t)
                        .count());
    }
    std::sort(v.begin(), v.end());
    return v[25];
}

int main() {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    int shapes[][3] = {{64, 64, 64},     {128, 1, 256},     {128, 64, 13},   {128, 128, 64},
                       {256, 128, 64},   {128, 256, 128},   {256, 256, 128}, {128, 512, 13},
                       {128, 256, 512},  {128, 64, 256},    {128, 512, 512}, {128, 1024, 1024},
                       {256, 512, 1024}, {256, 1024, 3456}, {2048, 512, 13}, {2048, 256, 512}};
    using dt = memory::data_type;
    using tag = memory::format_tag;
    for (auto& sh : shapes) {
        int M = sh[0], N = sh[1], K = sh[2];
        std::vector<uint16_t> A(M * K, 0x3f00), B(K * N, 0x3e80);
        std::vector<float> C(M * N);
        memory::desc a({M, K}, dt::bf16, tag::ab), b({K, N}, dt::bf16, tag::ba),
            c({M, N}, dt::f32, tag::ab);
        double t[2];
        for (int nt = 1; nt <= 2; nt++) {
            omp_set_num_threads(nt);
            matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
            matmul mm(pd);
            memory am(a, eng, A.data()), bm(b, eng, B.data()), cm(c, eng, C.data());
            t[nt - 1] = med([&] {
                mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
                s.wait();
            });
        }
        omp_set_num_threads(2);
        printf("%5d x %5d x %5d  MAC %.2fM  1 thread %.1f us  2 threads %.1f us\n", M, N, K,
               1e-6 * M * N * K, t[0], t[1]);
    }
}
