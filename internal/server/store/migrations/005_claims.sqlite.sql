-- Keys held once per space (an address per subnet), in bytewise order.
CREATE TABLE claims (
	space TEXT NOT NULL,
	item TEXT NOT NULL,
	PRIMARY KEY (space, item)
) WITHOUT ROWID
