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

func TestLayoutHelpers(t *testing.T) {
	layout := [][]int{{0, 2}, {1, 3}}
	require.True(t, Equal(layout, 4))
	require.False(t, Equal([][]int{{0, 1, 2}, {3}}, 4), "unequal hosts")
	require.False(t, Equal([][]int{{0}, {1}}, 2), "one rank per host")
	require.False(t, Equal([][]int{{0, 1}}, 2), "one host")
	require.False(t, Equal([][]int{{0, 1}, {1, 2}}, 4), "a rank twice")
	h, l := Where(layout, 3)
	require.Equal(t, []int{1, 1}, []int{h, l})
	h, l = Where(layout, 7)
	require.Equal(t, []int{-1, -1}, []int{h, l})
	require.Equal(t, []int{2, 3}, Rail(layout, 1))
}
