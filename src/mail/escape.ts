import escape from 'escape-html';

/** Text made safe to place in a mail's HTML part (element content or a quoted attribute). */
export const escapeHtml = (text: string): string => escape(text);
