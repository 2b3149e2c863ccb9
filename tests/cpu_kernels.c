/* tests/bin/cpu_kernels: one line per integer kernel, "NAME yes" or "NAME no WHAT IT NEEDS", as the
   test scripts should treat this machine (quant.h's check, narrowed by TEST_CPU_FLAGS: see
   cpu_kernels.h). tests/lib.sh reads it. */
#define QUANT_IMPLEMENTATION
#include "quant.h"
#include "cpu_kernels.h"
#include <stdio.h>

int main(void) {
    for (int k = QT_KERNEL_SCALAR; strcmp(qt_kernel_name((QtKernel)k), "?"); k++) {
        const char *needs;
        if (test_kernel_available((QtKernel)k, &needs))
            printf("%s yes\n", qt_kernel_name((QtKernel)k));
        else printf("%s no %s\n", qt_kernel_name((QtKernel)k), needs);
    }
    return 0;
}
