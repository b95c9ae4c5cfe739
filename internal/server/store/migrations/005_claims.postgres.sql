-- Keys held once per space (an address per subnet). Bytewise order, so that
-- fixed-width keys sort as the numbers they encode, whatever the locale.
CREATE TABLE claims (
	space TEXT COLLATE "C" NOT NULL,
	item TEXT COLLATE "C" NOT NULL,
	PRIMARY KEY (space, item)
)
