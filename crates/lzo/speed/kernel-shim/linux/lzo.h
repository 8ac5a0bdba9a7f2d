/* Empty: kshim.h (force-included) has what lib/lzo needs from here. */
