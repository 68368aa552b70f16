package hosts

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupLayouts(t *testing.T) {
	for _, c := range []struct {
		ids  []string
		want [][]int
	}{
		{[]string{"a"}, [][]int{{0}}},
		{[]string{"a", "a", "b", "b"}, [][]int{{0, 1}, {2, 3}}},
		// unequal hosts, interleaved ranks (a subgroup that skips ranks
		// sees its own ranks renumbered: the layout is in group ranks)
		{[]string{"a", "b", "a", "a", "c"}, [][]int{{0, 2, 3}, {1}, {4}}},
		{[]string{"b", "a", "b"}, [][]int{{0, 2}, {1}}},
	} {
		require.Equal(t, c.want, Group(c.ids), "%v", c.ids)
	}
}

func TestIDs(t *testing.T) {
	t.Setenv("ZIPCCL_HOST_ID", "")
	m := Machine()
	require.NotEmpty(t, m)
	require.Equal(t, m, Machine(), "stable")
	id := ID()
	require.Contains(t, id, m+"/netns:", "the machine and the namespace")
	dev, ino, err := NetNS()
	require.NoError(t, err)
	require.NotZero(t, ino)
	_ = dev
	t.Setenv("ZIPCCL_HOST_ID", "rack7-node3")
	require.Equal(t, "rack7-node3", Machine())
	require.Equal(t, "rack7-node3", ID())
}
