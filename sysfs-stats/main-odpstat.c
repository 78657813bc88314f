// SPDX-License-Identifier: MIT
/* odpstat - report ODP, registration-cache and paging activity; see odpstat(1). */
#include "counters.h"

int main(int argc, char **argv)
{
	return odpstat_main(argc, argv);
}
