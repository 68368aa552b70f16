module crcread

go 1.22
