package nccl

// Version is the NCCL_VERSION macro: the code NCCL uses for a version,
// 2.29.7 -> 22907, 2.8.4 -> 2804.
func Version(major, minor, patch int) int {
	if major <= 2 && minor <= 8 {
		return major*1000 + minor*100 + patch
	}
	return major*10000 + minor*100 + patch
}
